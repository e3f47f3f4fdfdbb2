"""The registry of promoted kernels: ``verified_kernels.json`` plus each kernel's copied
source under ``kernels/<id>/``, in the user's data dir (``TENFERRO_FORGE_REGISTRY`` moves
it). Every write happens under a file lock and lands by atomic rename, so readers never see
half a registry and racing promotions get distinct ids (or the same one for the same source)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from . import VERIFIER_VERSION
from .errors import ForgeError, PromotionError, RegistryError

FORMAT = 1
INDEX = "verified_kernels.json"
DEPENDENCIES = ("tenferro", "tenferro-numpy", "numpy", "tenferro-torch", "torch")


def root() -> Path:
    """``$TENFERRO_FORGE_REGISTRY``, else ``$XDG_DATA_HOME/tenferro/forge`` (default
    ``~/.local/share/tenferro/forge``)."""
    env = os.environ.get("TENFERRO_FORGE_REGISTRY")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "tenferro" / "forge"


@functools.cache
def device_fingerprint(device: str) -> str:
    """A short hash of what a timing depends on: the device name, CPU model, cores, machine;
    for torch:cuda:N also the GPU model and the triton version."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    parts = [device, model or platform.processor(), os.cpu_count(), platform.machine(), platform.system()]
    if device.startswith("torch:cuda"):
        parts += _gpu(device)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _gpu(device: str) -> list[str]:
    """The GPU model behind a torch:cuda:N device and the triton version (what a Triton
    kernel's timing depends on besides the host); "no GPU" where torch sees none."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = "none"
    name = "no GPU"
    with contextlib.suppress(Exception):  # torch missing, or a driver that fails to answer
        from tenferro_torch.discovery import cuda_device_count

        index = int(device.rpartition(":")[2])
        if index < cuda_device_count():
            import torch

            name = torch.cuda.get_device_name(index)
    return [name, f"triton {triton}"]


@functools.lru_cache(maxsize=1)
def _versions() -> tuple:
    out = [("python", ".".join(map(str, sys.version_info[:2])))]
    for dist in DEPENDENCIES:
        try:
            out.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            out.append((dist, "none"))
    return tuple(out)


def versions() -> dict[str, str]:
    """Versions of tenferro, its NumPy and torch backends, NumPy, torch and Python (an entry
    measured under others is not loaded); read once per process."""
    return dict(_versions())


def shape_bucket(shape: tuple) -> str:
    """Each dimension rounded up to a power of two (0 stays 0), joined by 'x'; 'scalar' for ()."""
    return "x".join(str(1 << (d - 1).bit_length() if d > 0 else 0) for d in shape) or "scalar"


def params_signature(params: dict) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def entry_hash(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != "entry_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def locked(base: Path | None = None) -> Iterator[Path]:
    """The registry directory, held under an exclusive file lock."""
    base = root() if base is None else base
    try:
        base.mkdir(parents=True, exist_ok=True)
        fd = os.open(base / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ForgeError(
            f"cannot open the registry at {base} ({exc}); set TENFERRO_FORGE_REGISTRY to a writable directory"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield base
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_index(base: Path | None = None) -> dict:
    """The index {"format", "entries": {id: entry}, "revoked": [...]} (empty when absent);
    a RegistryError when it is not readable JSON of this format."""
    path = (root() if base is None else base) / INDEX
    try:
        index = json.loads(path.read_text())
    except FileNotFoundError:
        return {"format": FORMAT, "entries": {}, "revoked": []}
    except (OSError, ValueError) as exc:
        raise RegistryError(
            f"{path} is corrupt ({exc}); fix or delete it (promoted kernels are ignored until then)"
        ) from exc
    if (
        not isinstance(index, dict)
        or index.get("format") != FORMAT
        or not isinstance(index.get("entries"), dict)
    ):
        raise RegistryError(f"{path} is not a format-{FORMAT} Forge registry; fix or delete it")
    index.setdefault("revoked", [])
    return index


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_index(base: Path, index: dict) -> None:
    _atomic_write(base / INDEX, json.dumps(index, indent=2, sort_keys=True) + "\n")


def add(
    task: dict, directory: Path, *, language: str, author: str, verify_report: Any, bench_report: Any
) -> dict:
    """Copy the candidate's source into the registry and record its entry (under the lock);
    the same source promoted twice gets its existing entry back."""
    buckets = "-".join(shape_bucket(tuple(s)) for s in task["shapes"])
    device_part = task["device"].replace(":", "-")
    prefix = f"{language}_{task['op']}_{device_part}_{task['dtype']}_{buckets}_v"
    src = (directory / "kernel.py").read_bytes()
    digest = hashlib.sha256(src).hexdigest()
    with locked() as base:
        index = read_index(base)
        for entry in index["entries"].values():
            if entry["id"].startswith(prefix) and entry["source_hash"] == digest:
                return entry
        taken = [k for k in [*index["entries"], *index["revoked"]] if k.startswith(prefix)]
        n = 1 + max((int(k[len(prefix) :]) for k in taken if k[len(prefix) :].isdigit()), default=0)
        kid = f"{prefix}{n}"
        entry = {
            "id": kid,
            "op": task["op"],
            "params": task["params"],
            "params_signature": params_signature(task["params"]),
            "device": task["device"],
            "backend": task["backend"],
            "device_fingerprint": device_fingerprint(task["device"]),
            "dtype": task["dtype"],
            "shapes": [list(s) for s in task["shapes"]],
            "shape_buckets": [shape_bucket(tuple(s)) for s in task["shapes"]],
            "language": language,
            "author": author,
            "source": f"kernels/{kid}/kernel.py",
            "source_hash": digest,
            "versions": versions(),
            "verifier_version": VERIFIER_VERSION,
            "statistics": bench_report.details.get("shapes", []),
            "gate": bench_report.details.get("gate"),
            "evidence": "microbenchmark",
            "task_dir": str(directory.resolve()),
            "promoted_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        entry["entry_hash"] = entry_hash(entry)
        dest = base / "kernels" / kid
        tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{kid}."))
        shutil.copyfile(directory / "kernel.py", tmp / "kernel.py")
        shutil.copyfile(directory / "metadata.json", tmp / "metadata.json")
        (base / "kernels").mkdir(exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
        index["entries"][kid] = entry
        write_index(base, index)
    return entry


def revoke(kid: str) -> dict:
    """Remove entry `kid` (its source too); dispatch stops using it in runtimes built after."""
    with locked() as base:
        index = read_index(base)
        entry = index["entries"].pop(kid, None)
        if entry is None:
            raise RegistryError(f"no promoted kernel {kid!r} in {base}; `tenferro-forge list` shows the ids")
        index["revoked"] = sorted(set(index["revoked"]) | {kid})
        write_index(base, index)
        shutil.rmtree(base / "kernels" / kid, ignore_errors=True)
    return entry


def entries() -> list[dict]:
    return sorted(read_index()["entries"].values(), key=lambda e: e["id"])


def show(kid: str) -> dict:
    entry = read_index()["entries"].get(kid)
    if entry is None:
        raise RegistryError(f"no promoted kernel {kid!r} in {root()}; `tenferro-forge list` shows the ids")
    return entry


def bandwidth_cached(value: float | None = None) -> float | None:
    """The machine's measured memory bandwidth (bytes/s) for this device fingerprint, read
    from ``machine.json`` beside the registry; `value` stores one."""
    fp = device_fingerprint("host")
    path = root() / "machine.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if value is None:
        got = data.get(fp)
        return float(got) if isinstance(got, (int, float)) and got > 0 else None
    with contextlib.suppress(OSError), locked() as base:
        data[fp] = float(value)
        _atomic_write(base / "machine.json", json.dumps(data) + "\n")
    return value


def promote(
    directory: str | os.PathLike, *, verify_report: Any = None, bench_report: Any = None, **gate_options: Any
) -> dict:
    """Promote the candidate in `directory` when both gates pass on its current source: runs
    verify and bench unless this process already holds their reports (files in the directory
    are never trusted); writes promotion.json beside the task; the registry entry."""
    from .gates import bench, read_candidate, source_hash, verify
    from .task import load_task

    d = Path(directory)
    task = load_task(d)
    digest = source_hash(d)
    if verify_report is None:
        verify_report = verify(
            d, **{k: v for k, v in gate_options.items() if k in ("timeout_s", "memory_mb")}
        )
    if verify_report.ok and bench_report is None:
        bench_report = bench(d, **gate_options)
    why = []
    for rep, name in ((verify_report, "verify"), (bench_report, "bench")):
        if rep is None or not rep.ok:
            reasons = "; ".join(f["reason"] for f in (rep.findings if rep else [])[:3])
            why.append(f"{name} did not pass ({reasons or 'not run'})")
        elif rep.source_hash != digest:
            why.append(f"{name} judged another version of the files (they changed since); re-run it")
    if any(r is not None and r.details.get("skip_scan") for r in (verify_report, bench_report)):
        why.append("a gate ran without the static scan")
    if (
        bench_report is not None
        and bench_report.ok
        and any(s.get("calls", 0) < 30 for s in bench_report.details.get("shapes", []))
    ):
        why.append("the benchmark took fewer than 30 timed calls per shape")
    if why:
        raise PromotionError(f"not promoted: {'; '.join(why)}")
    _, meta, _ = read_candidate(d, task)
    entry = add(
        task,
        d,
        language=meta["language"],
        author=meta["author"],
        verify_report=verify_report,
        bench_report=bench_report,
    )
    record = {
        "id": entry["id"],
        "registry": str(root()),
        "source_hash": entry["source_hash"],
        "promoted_at": entry["promoted_at"],
        "statistics": entry["statistics"],
    }
    _atomic_write(d / "promotion.json", json.dumps(record, indent=2) + "\n")
    return entry


def reverify(**options: Any) -> list[tuple[str, Any]]:
    """Re-run verification of every entry (a fresh task built from the entry, its registry
    source); entries that fail now are revoked. [(id, report)]."""
    from .gates import verify
    from .task import new_task

    out = []
    for entry in entries():
        with tempfile.TemporaryDirectory(prefix="forge-reverify-") as tmp:
            new_task(
                tmp,
                entry["op"],
                device=entry["device"],
                dtype=entry["dtype"],
                shapes=[tuple(s) for s in entry["shapes"]],
                params=entry["params"],
            )
            src = root() / "kernels" / entry["id"]
            for name in ("kernel.py", "metadata.json"):
                if (src / name).is_file():
                    shutil.copyfile(src / name, Path(tmp) / name)
            report = verify(tmp, write=False, **options)
            if not (src / "kernel.py").is_file() or file_hash(src / "kernel.py") != entry["source_hash"]:
                report.ok = False
                report.findings.append({"check": "registry", "reason": "source missing or changed (hash)"})
        if not report.ok:
            revoke(entry["id"])
        else:
            _stamp_verified(entry["id"], entry["source_hash"])
        out.append((entry["id"], report))
    return out


def _stamp_verified(kid: str, digest: str) -> None:
    """Record that entry `kid` (still of source `digest`) passed this verifier version."""
    with locked() as base:
        index = read_index(base)
        entry = index["entries"].get(kid)
        if entry is None or entry["source_hash"] != digest:
            return
        entry["verifier_version"] = VERIFIER_VERSION
        entry["entry_hash"] = entry_hash(entry)
        write_index(base, index)


__all__ = [
    "add",
    "bandwidth_cached",
    "device_fingerprint",
    "entries",
    "promote",
    "read_index",
    "reverify",
    "revoke",
    "root",
    "shape_bucket",
    "show",
    "versions",
]
