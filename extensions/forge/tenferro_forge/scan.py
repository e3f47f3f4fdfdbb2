"""The static scan of a candidate's kernel.py: one finding (line, reason) per forbidden
construct. An allow list of modules, plus named reasons for the families of cheats and
escapes the list stops (the scan only reads the source: it never imports it)."""

from __future__ import annotations

import ast

ALLOWED = {
    "numpy",
    "math",
    "functools",
    "itertools",
    "operator",
    "typing",
    "__future__",
    "collections",
    "dataclasses",
}
MODULE_REASONS = {
    "subprocess": "starts processes",
    "os": "process and file calls (os)",
    "sys": "reaches interpreter internals (sys)",
    "ctypes": "raw memory and foreign calls (ctypes)",
    "cffi": "raw memory and foreign calls (cffi)",
    "signal": "signal handlers",
    "threading": "threads: work deferred past the call",
    "_thread": "threads: work deferred past the call",
    "concurrent": "threads or processes: work deferred past the call",
    "multiprocessing": "processes: work deferred past the call",
    "asyncio": "event loops: work deferred past the call",
    "time": "touches timers (time)",
    "timeit": "touches timers (timeit)",
    "socket": "network",
    "http": "network",
    "urllib": "network",
    "requests": "network",
    "ssl": "network",
    "importlib": "importlib tricks",
    "imp": "importlib tricks",
    "pkgutil": "importlib tricks",
    "runpy": "importlib tricks",
    "builtins": "patches builtins",
    "gc": "reaches the harness's objects (gc)",
    "inspect": "reaches the harness's frames (inspect)",
    "traceback": "reaches the harness's frames",
    "weakref": "keeps hidden references",
    "pickle": "loads arbitrary objects",
    "marshal": "loads code objects",
    "shutil": "file writes",
    "pathlib": "file access",
    "io": "file access",
    "tempfile": "file writes",
    "mmap": "raw memory",
    "faulthandler": "interpreter internals",
    "resource": "changes the sandbox's limits",
    "tenferro": "calls the reference or the baseline kernel",
    "scipy": "calls a library kernel the reference uses (scipy)",
}
CALL_REASONS = {
    "eval": "eval",
    "exec": "exec",
    "compile": "compile",
    "__import__": "importlib tricks (__import__)",
    "open": "file access (open)",
    "globals": "reaches module globals",
    "locals": "reaches frames",
    "vars": "reaches object dicts",
    "setattr": "monkey-patching (setattr)",
    "delattr": "monkey-patching",
    "getattr": "dynamic attribute access (getattr)",
    "breakpoint": "debugger",
    "input": "reads stdin",
    "print": "writes to the harness's stdout",
    "exit": "exits the interpreter",
    "quit": "exits the interpreter",
}
NUMPY_REASONS = {
    "save": "file writes",
    "savez": "file writes",
    "savetxt": "file writes",
    "load": "file reads",
    "loadtxt": "file reads",
    "fromfile": "file reads",
    "tofile": "file writes",
    "memmap": "file-backed memory",
    "ctypeslib": "raw memory (numpy.ctypeslib)",
    "as_strided": "raw strided views (as_strided)",
    "stride_tricks": "raw strided views",
    "testing": "test helpers",
    "seterrcall": "error callbacks",
}
LAZY_DUNDERS = {
    "__array__",
    "__array_ufunc__",
    "__array_function__",
    "__array_interface__",
    "__array_finalize__",
    "__array_wrap__",
    "__getattr__",
    "__dlpack__",
    "__del__",
    "__torch_function__",
    "__torch_dispatch__",
}
TORCH_REASONS = {
    "compile": "torch.compile: a compiler that caches across calls and spawns compile workers",
    "jit": "torch.jit: compiled and cached code (scripting, tracing, fork)",
    "utils": "torch.utils (cpp_extension compiles in subprocesses; hooks, checkpoints)",
    "ops": "torch.ops reaches registered kernels (tenferro's baseline among them)",
    "library": "torch.library registers or patches kernels",
    "cuda": "torch.cuda: GPU candidates are not judged yet",
    "distributed": "torch.distributed: processes and network",
    "multiprocessing": "processes: work deferred past the call",
    "futures": "futures: work deferred past the call",
    "from_file": "file reads",
    "set_num_threads": "changes torch's thread count (the benchmark pins it for both kernels)",
    "set_num_interop_threads": "changes torch's thread count (the benchmark pins it for both kernels)",
    "set_default_dtype": "changes torch's global state (default dtype)",
    "set_default_tensor_type": "changes torch's global state (default dtype)",
    "set_flush_denormal": "changes torch's global state (flushes subnormals)",
    "set_float32_matmul_precision": "changes torch's global state (lower matmul precision)",
    "backends": "torch.backends flags are global state (TF32, oneDNN, precision)",
    "use_deterministic_algorithms": "changes torch's global state",
    "autocast": "autocast: computes in a narrower dtype (precision downcast)",
    "storage": "raw storage access (aliasing, stale memory)",
    "untyped_storage": "raw storage access (aliasing, stale memory)",
    "data_ptr": "raw memory addresses",
    "set_": "swaps a tensor's storage (aliasing)",
    "share_memory_": "shared memory across processes",
    "from_dlpack": "raw memory exchange (dlpack)",
    "frombuffer": "raw memory",
}
"""Attributes a torch candidate may not use (plain torch ops are allowed)."""
TRITON_REASONS = {
    "autotune": "triton.autotune times configs inside the first call and caches by argument",
    "testing": "triton.testing: timers and benchmarks",
    "compile": "triton.compile: compiles outside the launch path",
    "compiler": "triton.compiler: compiles outside the launch path",
    "runtime": "triton.runtime: drivers, caches and launch internals",
    "knobs": "triton.knobs: global switches (the interpreter, caches)",
    "backends": "triton.backends: drivers and compilers",
    "tools": "triton.tools: ahead-of-time compilation and disassembly",
    "profiler": "triton.profiler: timers",
    "inline_asm_elementwise": "inline assembly: code the scan cannot read",
}
"""Triton attributes a Triton candidate may not use (triton.jit, cdiv, language ops are allowed)."""
NARROWER = {
    "float64": {"float32", "single", "float16", "half", "bfloat16", "f4", "f2", "e", "f", "<f4", "<f2"},
    "float32": {"float16", "half", "bfloat16", "f2", "e", "<f2"},
    "float16": set(),
}


def scan(
    source: str, *, language: str = "numpy", dtype: str = "float32", allowed_extra: tuple[str, ...] = ()
) -> list[dict]:
    """Findings ``{"check": "scan", "line": n, "reason": ...}`` for `source` (a syntax error
    is one finding)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [{"check": "scan", "line": exc.lineno or 0, "reason": f"syntax error: {exc.msg}"}]
    allow = ALLOWED | set(allowed_extra)
    out: list[dict] = []
    modules: set[str] = set()
    narrow = NARROWER.get(dtype, set())
    torch = language in ("torch", "triton")
    triton = language == "triton"
    if torch and dtype == "float64":
        narrow = narrow | {"float"}  # .float(), torch.float: float32

    def find(node: ast.AST, reason: str) -> None:
        out.append({"check": "scan", "line": getattr(node, "lineno", 0), "reason": reason})

    def module(node: ast.AST, name: str) -> None:
        root = name.split(".")[0]
        key = "tenferro" if root.startswith("tenferro") else root
        if key in MODULE_REASONS and root not in allow:
            find(node, f"import of {name}: {MODULE_REASONS[key]}")
        elif root not in allow:
            find(node, f"import of {name}: not on the allow list ({', '.join(sorted(allow))})")
        parts = name.split(".")
        if root == "torch" and len(parts) > 1 and (parts[1] in TORCH_REASONS or parts[1].startswith("_")):
            find(node, f"import of {name}: {TORCH_REASONS.get(parts[1], 'private torch internals')}")
        bad = [p for p in parts[1:] if p in TRITON_REASONS or p.startswith("_")]
        if root == "triton" and bad:
            find(node, f"import of {name}: {TRITON_REASONS.get(bad[0], 'private triton internals')}")
        if name in ("numpy.ctypeslib", "numpy.lib.stride_tricks", "numpy.testing"):
            find(node, f"import of {name}: {NUMPY_REASONS[name.split('.')[-1]]}")

    triton_names = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
        if ((n.module or "") if isinstance(n, ast.ImportFrom) else a.name).split(".")[0] == "triton"
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                module(node, a.name)
                modules.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module(node, "." * node.level + (node.module or "") if node.level else node.module or "")
            for a in node.names:
                if node.module and node.module.split(".")[0] == "numpy" and a.name in NUMPY_REASONS:
                    find(node, f"numpy.{a.name}: {NUMPY_REASONS[a.name]}")
                if node.module and node.module.split(".")[0] == "triton" and (
                    a.name in TRITON_REASONS or a.name.startswith("_")
                ):
                    why = TRITON_REASONS.get(a.name, "private triton internals")
                    find(node, f"{node.module}.{a.name}: {why}")
                if node.module and node.module.split(".")[0] == "torch" and (
                    a.name in TORCH_REASONS or a.name.startswith("_")
                ):
                    find(node, f"torch.{a.name}: {TORCH_REASONS.get(a.name, 'private torch internals')}")
                if a.name in narrow:
                    find(node, f"dtype downcast: imports {a.name}, narrower than the task's {dtype}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALL_REASONS:
            find(node, f"call of {node.func.id}: {CALL_REASONS[node.func.id]}")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            find(node, f"{node.id}: interpreter internals")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__"):
                find(node, f"dunder attribute {node.attr}: introspection reaches the harness")
            elif node.attr in NUMPY_REASONS and not (triton and _root(node) in triton_names):
                find(node, f"attribute {node.attr}: {NUMPY_REASONS[node.attr]}")
            elif node.attr in ("f_back", "f_globals", "gi_frame", "tb_frame", "cr_frame"):
                find(node, f"attribute {node.attr}: reaches the harness's frames")
            elif triton and node.attr in TRITON_REASONS and _root(node) in triton_names:
                find(node, f"attribute {node.attr}: {TRITON_REASONS[node.attr]}")
            elif torch and node.attr in TORCH_REASONS and not (triton and _root(node) in triton_names):
                find(node, f"attribute {node.attr}: {TORCH_REASONS[node.attr]}")
            elif torch and node.attr.startswith("_"):
                find(node, f"attribute {node.attr}: private torch or tensor internals")
            if node.attr in narrow:
                find(node, f"dtype downcast: {node.attr} is narrower than the task's {dtype}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in narrow:
            find(node, f"dtype downcast: {node.value!r} names a dtype narrower than the task's {dtype}")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and _root(sub) in modules:
                        find(node, f"monkey-patching: assigns {ast.unparse(sub)} of module {_root(sub)}")
        elif isinstance(node, ast.ClassDef):
            for b in node.bases:
                if "ndarray" in ast.unparse(b) or "Tensor" in ast.unparse(b):
                    find(node, f"class {node.name} subclasses {ast.unparse(b)}: a tensor subclass")
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in LAZY_DUNDERS:
                    find(item, f"class {node.name} defines {item.name}: a lazy or array-like object")
        elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.Yield, ast.YieldFrom)):
            find(node, "generators or coroutines: work deferred past the call")
        elif isinstance(node, ast.Global) and any(n in modules for n in node.names):
            find(node, "rebinds a module name (global)")
    jitted = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in n.decorator_list)
    ]
    others = {  # module names a kernel body may not reach: only the interpreter would run them
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    } - triton_names - {"math"}
    for fn in jitted if triton else []:
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Name) and sub.id in others:
                find(sub, f"{sub.id} inside @triton.jit {fn.name}: a kernel computes with triton.language "
                     f"only (other modules run only in the interpreter)")
    if triton and not jitted:
        why = "a Triton candidate defines no top-level @triton.jit kernel"
        out.append({"check": "scan", "line": 0, "reason": why})
    if not any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in tree.body):
        out.append({"check": "scan", "line": 0, "reason": "kernel.py defines no top-level function `kernel`"})
    return out


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


__all__ = ["ALLOWED", "TORCH_REASONS", "TRITON_REASONS", "scan"]
