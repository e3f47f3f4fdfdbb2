"""Serialization failures: a damaged header (truncated file, bad JSON, wrong types, wrong
offsets, a damaged tenferro header) is a `SerializationError` (a ValueError) naming the file;
a write the operating system refuses (a read-only folder, a full disk, a directory at the path)
is a `TenferroIOError` (an OSError with its errno) naming the path, and the old file is left as
it was; an overwritten file keeps its permission bits."""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tenferro_core.errors import TenferroError, TenferroIOError
from tenferro_nn import serialization
from tenferro_nn.serialization import SerializationError, load, load_metadata, load_state, save, save_state
from tenferro_runtime import array_api as xp

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def _saved(tmp_path: Path, name: str = "m.safetensors") -> Path:
    path = tmp_path / name
    save(path, {"w": W, "b": np.ones(3), "z": np.zeros(2, dtype=np.complex64)}, metadata={"note": "x"})
    return path


def _split(data: bytes) -> tuple[dict, bytes]:
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def _join(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def _edit(path: Path, fn) -> bytes:
    """Rewrite the file's header with `fn(header)` (in place); the new bytes."""
    header, body = _split(path.read_bytes())
    fn(header)
    data = _join(header, body)
    path.write_bytes(data)
    return data


def _damaged(path: Path, fragment: str, *readers) -> None:
    """Every reader raises a SerializationError (a TenferroError and a ValueError) naming the
    file and `fragment`; the file is not touched."""
    before = path.read_bytes()
    for read in readers or (load,):
        with pytest.raises(SerializationError) as info:
            read(path)
        e = info.value
        assert isinstance(e, TenferroError) and isinstance(e, ValueError)
        assert str(path) in str(e) and fragment in str(e), str(e)
    assert path.read_bytes() == before


def _set_meta(key: str, value):
    def fn(h):
        h["__metadata__"][key] = value
    return fn


# ---- damaged files -----------------------------------------------------------------------------
def test_a_truncated_file(tmp_path):
    path = _saved(tmp_path)
    data = path.read_bytes()
    for cut in (len(data) - 5, 40, 12, 5, 0):
        path.write_bytes(data[:cut])
        _damaged(path, "is not a safetensors file or its header is damaged", load, load_metadata)


def test_bad_json_and_wrong_types_in_the_safetensors_header(tmp_path):
    path = _saved(tmp_path)
    header, body = _split(path.read_bytes())
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text[:-1] + b"!" + body)  # bad JSON
    _damaged(path, "header is damaged", load, load_metadata)
    for edit in (lambda h: h["w"].__setitem__("shape", "abc"),  # wrong types
                 lambda h: h["w"].__setitem__("dtype", 7),
                 lambda h: h["__metadata__"].__setitem__("note", 3),
                 lambda h: h["w"].__setitem__("shape", [3, 5]),  # the length does not fit the offsets
                 lambda h: h["w"].__setitem__("data_offsets", [0, 10**6]),  # past the end
                 lambda h: h["b"].__setitem__("data_offsets", [1, 25])):  # overlapping / a hole
        path = _saved(tmp_path)
        _edit(path, edit)
        _damaged(path, "header is damaged", load)
    path.write_bytes(struct.pack("<Q", 2**60) + b"{}")  # a length larger than the file
    _damaged(path, "header is damaged")


@pytest.mark.parametrize("value, fragment", [
    ("{not json", "'tenferro.dtypes' is not JSON"),
    ('["float32"]', "'tenferro.dtypes' is a JSON list"),
    ('{"w": 3, "b": "float64", "z": "complex64"}', "gives tensor 'w' the dtype 3"),
    ('{"w": "float128", "b": "float64", "z": "complex64"}', "the dtype 'float128', which is no tenferro"),
    ('{"w": "float32", "b": "float64"}', "does not list the file's tensors (tensors it lacks: ['z']"),
    ('{"w": "float32", "b": "float64", "z": "complex64", "q": "int8"}', "names no tensor has: ['q']"),
    ('{"w": "float64", "b": "float64", "z": "complex64"}', "'w' is marked float64 but stored as float32"),
    ('{"w": "complex64", "b": "float64", "z": "complex64"}', "'w' is marked complex64 but stored as"),
])
def test_a_damaged_tenferro_dtypes_entry(tmp_path, value, fragment):
    path = _saved(tmp_path)
    _edit(path, _set_meta("tenferro.dtypes", value))
    _damaged(path, fragment)


def _state_file(tmp_path: Path) -> tuple[Path, dict]:
    like = {"step": 3, "lr": 0.5, "m": xp.asarray(np.ones(2)), "name": "adam"}
    path = tmp_path / "s.safetensors"
    save_state(path, like)
    return path, like


@pytest.mark.parametrize("edit, fragment", [
    (lambda t: "{not json", "'tenferro.tree' is not JSON"),
    (lambda t: json.dumps([1, 2]), "must be an object with 'nodes' and 'leaves' lists"),
    (lambda t: json.dumps({**t, "nodes": "x"}), "must be an object with 'nodes' and 'leaves' lists"),
    (lambda t: json.dumps({**t, "nodes": [[1, "dict", None]] + t["nodes"][1:]}), "has the node [1, 'dict'"),
    (lambda t: json.dumps({**t, "leaves": [["m", ["x"], None]] + t["leaves"][1:]}), "has the leaf ['m', "),
    (lambda t: json.dumps({**t, "leaves": t["leaves"][:-1]}), "lists 3 leaves that do not match its 4"),
    (lambda t: json.dumps({**t, "leaves": [[p, n, "3" if p == "step" else v] for p, n, v in t["leaves"]]}),
     "the value of 'step' is a str but its node says int"),
    (lambda t: json.dumps({**t, "leaves": [[p, "m" if p == "lr" else n, None if p == "lr" else v]
                                           for p, n, v in t["leaves"]]}), "'lr' names tensor 'm' but"),
])
def test_a_damaged_tenferro_tree_entry(tmp_path, edit, fragment):
    path, like = _state_file(tmp_path)
    _edit(path, lambda h: h["__metadata__"].__setitem__(
        "tenferro.tree", edit(json.loads(h["__metadata__"]["tenferro.tree"]))))
    _damaged(path, fragment, lambda p: load_state(p, like))


def test_an_undamaged_state_still_loads(tmp_path):
    path, like = _state_file(tmp_path)
    got = load_state(path, like)
    assert got["step"] == 3 and got["lr"] == 0.5 and got["name"] == "adam"


def test_reading_a_directory_is_an_os_error(tmp_path):
    with pytest.raises(TenferroIOError) as info:
        load(tmp_path)
    e = info.value
    assert isinstance(e, OSError) and isinstance(e, TenferroError) and e.errno == errno.EISDIR
    assert e.filename == str(tmp_path) and "is a directory" in str(e) and str(tmp_path) in str(e)


# ---- writing: atomic, typed OS errors, permission bits ------------------------------------------
def _io_error(info, path, code, fragment):
    e = info.value
    assert isinstance(e, TenferroIOError) and isinstance(e, TenferroError) and isinstance(e, OSError)
    assert e.errno == code and e.filename == str(path)
    assert repr(str(path)) in str(e) and fragment in str(e), str(e)
    assert "the existing file, if any, is unchanged" in str(e) or "is a directory" in str(e)


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_saving_to_a_directory_path(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(TenferroIOError) as info:
        save(target, {"w": W})
    _io_error(info, target, errno.EISDIR, "is a directory")
    assert target.is_dir() and (target / "keep").read_text() == "x" and _leftovers(tmp_path) == []


def test_a_full_disk_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = _saved(tmp_path)
    old = path.read_bytes()
    written = []

    def full(fd, data):  # the disk fills up part-way through the tensors
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.write(fd, bytes(memoryview(data)[:16]))
        written.append(1)

    monkeypatch.setattr(serialization, "_write_all", full)
    with pytest.raises(TenferroIOError) as info:
        save(path, {"w": np.ones((64, 64))})
    _io_error(info, path, errno.ENOSPC, "No space left on device")
    assert isinstance(info.value.__cause__, OSError)
    assert path.read_bytes() == old and _leftovers(tmp_path) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE / SIGXFSZ as on Linux")
def test_a_file_size_limit_leaves_the_old_file_intact(tmp_path):
    """A real short write: the process may not write past 64 KiB (RLIMIT_FSIZE; EFBIG)."""
    path = _saved(tmp_path)
    old = path.read_bytes()
    code = textwrap.dedent(f"""
        import errno, resource, signal, sys
        import numpy as np
        from tenferro_core.errors import TenferroIOError
        from tenferro_nn.serialization import save
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            save({str(path)!r}, {{"w": np.ones(1 << 16)}})
        except TenferroIOError as e:
            print("refused", e.errno == errno.EFBIG, isinstance(e, OSError), {str(path)!r} in str(e))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["refused", "True", "True", "True"], out.stdout + out.stderr
    assert path.read_bytes() == old and _leftovers(tmp_path) == []


def test_a_read_only_folder_simulated(tmp_path, monkeypatch):
    """As a read-only folder refuses the temporary file (EACCES); run by root too."""
    path = _saved(tmp_path)
    old = path.read_bytes()
    real_open = os.open

    def refuse(name, flags, *args, **kwargs):
        if str(name).endswith(".tmp"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(TenferroIOError) as info:
        save(path, {"w": np.zeros(3)})
    monkeypatch.undo()
    _io_error(info, path, errno.EACCES, "Permission denied")
    assert ".tmp" not in str(info.value)  # names the target, not the temporary file
    assert path.read_bytes() == old and _leftovers(tmp_path) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _saved(folder)
    old = path.read_bytes()
    folder.chmod(0o555)
    try:
        with pytest.raises(TenferroIOError) as info:
            save(path, {"w": np.zeros(3)})
        _io_error(info, path, errno.EACCES, "Permission denied")
        assert path.read_bytes() == old and _leftovers(folder) == []
    finally:
        folder.chmod(0o755)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_overwriting_keeps_the_file_mode(tmp_path, mode):
    path = _saved(tmp_path)
    path.chmod(mode)
    save(path, {"w": np.ones(5)})
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert list(load(path)) == ["w"]
    save_state(path, {"a": xp.asarray(np.ones(2))})
    assert stat.S_IMODE(path.stat().st_mode) == mode and _leftovers(tmp_path) == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        save(tmp_path / "new.safetensors", {"w": W})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.safetensors").stat().st_mode) == 0o640


def test_the_written_file_is_standard_safetensors(tmp_path):
    """Written by tenferro's own writer: the safetensors reader opens it, aligned tensors."""
    from safetensors.numpy import load_file

    arrays = {"flag": np.array([True, False, True]), "b16": np.arange(3, dtype=np.int16),
              "w": W, "d": np.arange(5.0), "empty": np.zeros((0, 4), dtype=np.float32),
              "scalar": np.array(2.5, dtype=np.float32)}
    save(tmp_path / "a.safetensors", arrays)
    got = load_file(str(tmp_path / "a.safetensors"))
    for k, a in arrays.items():
        assert got[k].dtype == a.dtype and got[k].shape == a.shape
        np.testing.assert_array_equal(got[k], a)
    header, _ = _split((tmp_path / "a.safetensors").read_bytes())
    n = struct.unpack("<Q", (tmp_path / "a.safetensors").read_bytes()[:8])[0]
    assert n % 8 == 0
    for k, a in arrays.items():  # each tensor starts on a multiple of its item size
        assert header[k]["data_offsets"][0] % a.dtype.itemsize == 0
    assert list(load(tmp_path / "a.safetensors")) == list(arrays)  # the saved order
