"""A bounded GGUF header reader: metadata and tensor table, from a local file or an HTTP range.

Layout (GGUF v2/v3, little-endian; ggml `docs/gguf.md`, `ggml/src/gguf.cpp`):
  "GGUF" u32 version, u64 n_tensors, u64 n_kv,
  n_kv x (string key, u32 value type, value),  string = u64 length + UTF-8 bytes,
  array value = u32 element type, u64 count, elements,
  n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml type, u64 offset),
  padding to `general.alignment` (default 32), then the tensor data.

The reader is hostile-input safe: it never allocates for a claimed size before those bytes have
arrived, refuses counts that cannot fit in what it may read, and applies the same checks that
llama.cpp's loader applies (so a file we accept is one llama.cpp would accept, and vice versa).
Turning a header into a ModelSpec/DraftSpec lives in `homespec.formats.gguf_model`.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass, field
from typing import Collection

from homespec.errors import FormatError
from homespec.formats.http import open_source
from homespec.quant.tables import GGML_TYPES
from homespec.types import TensorInfo

MAX_BYTES = 64 * 1024 * 1024
_SMALL_ARRAY = 4096  # arrays up to this long are kept whole (per-layer head counts, SWA patterns)
_GROW = 256 * 1024
_MAX_DIMS = 4  # GGML_MAX_DIMS
_INT64_MAX = 2**63 - 1
_HINT_CORRUPT = "the file is damaged or not a GGUF model; download it again"

# GGUF value types (gguf.GGUFValueType): id -> (name, struct format or None for string/array)
_VALUE_TYPES = {
    0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"),
    4: ("UINT32", "<I"), 5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<?"),
    8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "<Q"), 11: ("INT64", "<q"),
    12: ("FLOAT64", "<d"),
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class ArrayInfo:
    """A metadata array too big to keep (tokenizer.ggml.tokens): its element type and length."""

    type: str
    length: int


Scalar = int | float | bool | str


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Scalar | list | ArrayInfo]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int  # absolute offset of the tensor data section
    file_size: int | None = None
    source: str = ""
    # key -> (GGUF value type, element type for arrays else None): what a writer needs to copy a value
    value_types: dict[str, tuple[int, int | None]] = field(default_factory=dict)

    @property
    def arch(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def array_length(self, key: str) -> int | None:
        value = self.metadata.get(key)
        if isinstance(value, ArrayInfo):
            return value.length
        return len(value) if isinstance(value, list) else None


@functools.cache
def ggml_types() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, elements per block, bytes per block).

    Ids and names come from the gguf package; block sizes from homespec.quant.tables (profiles/quants.toml,
    checked against ggml-common.h), falling back to the gguf package's table. The two disagree on
    Q8_1 only: gguf-py says 40 bytes, ggml's block_q8_1 is 2 halves + 32 int8 = 36 bytes.
    """
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    return {int(t): (t.name, *GGML_TYPES.get(t.name, GGML_QUANT_SIZES[t]))
            for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


def file_type_name(file_type: int) -> str | None:
    """general.file_type (llama_ftype) -> "Q4_K_M", "F16", ... (None when unknown)."""
    from gguf.constants import LlamaFileType

    try:
        name = LlamaFileType(int(file_type)).name
    except ValueError:
        return None
    return {"ALL_F32": "F32", "GUESSED": None}.get(name, name.removeprefix("MOSTLY_"))


class _Cursor:
    """A read position over bytes that arrive on demand, never beyond `limit`."""

    def __init__(self, source, limit: int, label: str):
        self.src = source
        self.buf = bytearray()
        self.pos = 0
        self.label = label
        size = getattr(source, "file_size", None)
        self.limit = limit if size is None else min(limit, size)
        self.max_bytes = limit
        self._grow = _GROW

    def fail(self, what: str, hint: str = _HINT_CORRUPT) -> FormatError:
        return FormatError(f"{self.label}: {what}", hint=hint)

    def too_big(self, claim: str) -> FormatError:
        """A count or length that cannot fit in what may still be read."""
        room = max(self.room(), 0)
        if self.limit == self.max_bytes:  # capped by max_bytes, not by the end of the file
            return self.fail(f"{claim}, more than the {self.max_bytes}-byte header limit leaves ({room} bytes)",
                             hint="the file is corrupt, or pass a larger max_bytes")
        return self.fail(f"{claim}, more than the {room} bytes left in the file")

    def room(self) -> int:
        """Bytes that may still follow the current position."""
        return self.limit - self.pos

    def ensure(self, n: int) -> None:
        end = self.pos + n
        if end <= len(self.buf):
            return
        if end > self.limit:
            if end > self.max_bytes:
                raise self.fail(f"the header is larger than the {self.max_bytes}-byte header limit (at offset {self.pos})",
                                hint="the file is corrupt, or pass a larger max_bytes")
            raise self.fail(f"truncated: needed bytes up to offset {end}, the file ends at {self.limit}")
        while len(self.buf) < end:
            want = max(end - len(self.buf), self._grow)
            want = min(want, self.limit - len(self.buf))
            chunk = self.src.read(want)
            if not chunk:
                raise self.fail(f"truncated: needed bytes up to offset {end}, got {len(self.buf)}")
            self.buf += chunk
            self._grow = min(self._grow * 2, 16 * 1024 * 1024)

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        self.ensure(size)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def skip(self, n: int) -> None:
        self.ensure(n)
        self.pos += n

    def string(self, what: str) -> str:
        n = self.take("<Q")
        if n > self.room():
            raise self.too_big(f"{what} claims a {n}-byte string")
        self.ensure(n)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")


def _value(cur: _Cursor, vtype: int, key: str, keep: bool):
    if vtype == _STRING:
        return cur.string(f"value of {key!r}")
    if vtype == _ARRAY:
        return _array(cur, key, keep)
    if vtype not in _VALUE_TYPES:
        raise cur.fail(f"key {key!r} has unknown value type {vtype}")
    return cur.take(_VALUE_TYPES[vtype][1])


def _array(cur: _Cursor, key: str, keep: bool):
    etype = cur.take("<I")
    count = cur.take("<Q")
    if etype == _ARRAY:
        raise cur.fail(f"key {key!r} is an array of arrays, which GGUF loaders do not support")
    if etype not in _VALUE_TYPES:
        raise cur.fail(f"array {key!r} has unknown element type {etype}")
    fmt = _VALUE_TYPES[etype][1]
    min_size = 8 if etype == _STRING else struct.calcsize(fmt)
    if count * min_size > cur.room():
        raise cur.too_big(f"array {key!r} claims {count} elements")
    name = _VALUE_TYPES[etype][0]
    whole = keep or count <= _SMALL_ARRAY
    if etype == _STRING:
        if whole:
            return [cur.string(f"element of {key!r}") for _ in range(count)]
        for _ in range(count):  # skip, still checking every length against what is left
            n = cur.take("<Q")
            if n > cur.room():
                raise cur.too_big(f"an element of {key!r} claims a {n}-byte string")
            cur.skip(n)
        return ArrayInfo(name, count)
    if not whole:
        cur.skip(count * min_size)
        return ArrayInfo(name, count)
    cur.ensure(count * min_size)
    values = list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, cur.pos))
    cur.pos += count * min_size
    return values


def _tensor(cur: _Cursor, types: dict[int, tuple[str, int, int]]) -> tuple[TensorInfo, int]:
    name = cur.string("a tensor name")
    n_dims = cur.take("<I")
    if n_dims > _MAX_DIMS:
        raise cur.fail(f"tensor {name!r} has {n_dims} dimensions; ggml allows at most {_MAX_DIMS}")
    shape = tuple(cur.take("<Q") for _ in range(n_dims))
    n = 1
    for d in shape:
        if d > _INT64_MAX or (d and n > _INT64_MAX // d):
            raise cur.fail(f"tensor {name!r} has dimensions {shape} whose element count overflows int64")
        n *= d
    type_id = cur.take("<I")
    if type_id not in types:
        raise cur.fail(f"tensor {name!r} has unknown ggml type {type_id}",
                       hint="the file needs a newer llama.cpp, or it is damaged")
    type_name, block, type_size = types[type_id]
    if shape and shape[0] % block:
        raise cur.fail(f"tensor {name!r} ({type_name}) has rows of {shape[0]} elements, "
                       f"not a multiple of the block size {block}")
    offset = cur.take("<Q")
    layer = None
    if name.startswith("blk."):
        idx = name.split(".", 2)[1]
        layer = int(idx) if idx.isdigit() else None
    return TensorInfo(name, shape, type_name, n // block * type_size, layer), offset


def parse_gguf(source, *, max_bytes: int = MAX_BYTES, label: str = "GGUF",
               keep_arrays: Collection[str] = ()) -> GGUFHeader:
    """Parse a header from a sequential byte source (anything with read(n) and optional file_size)."""
    cur = _Cursor(source, max_bytes, label)
    if cur.limit >= 4:
        cur.ensure(4)
    if cur.limit < 4 or bytes(cur.buf[:4]) != b"GGUF":
        head = bytes(cur.buf[:16])
        raise FormatError(f"{label}: not a GGUF file (starts with {head!r})",
                          hint="pass a .gguf model file (an HTML page means the URL is a web page, not the file)")
    cur.pos = 4
    version = cur.take("<I")
    if version & 0xFFFF == 0:
        raise cur.fail(f"GGUF version {version:#x} looks byte-swapped (a big-endian file)",
                       hint="convert the model on a little-endian machine")
    if version == 1 or version > 3:
        raise cur.fail(f"GGUF version {version} is not supported (2 and 3 are)",
                       hint="re-convert the model with a current llama.cpp")
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    # smallest encodings: a kv pair 8+1+4+1 bytes, a tensor record 8+1+4+4+8
    if n_kv * 14 > cur.room():
        raise cur.too_big(f"the header claims {n_kv} metadata pairs")
    if n_tensors * 25 > cur.room():
        raise cur.too_big(f"the header claims {n_tensors} tensors")

    metadata: dict = {}
    value_types: dict[str, tuple[int, int | None]] = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        vtype = cur.take("<I")
        etype = None
        if vtype == _ARRAY:
            cur.ensure(4)
            (etype,) = struct.unpack_from("<I", cur.buf, cur.pos)
        value_types[key] = (vtype, etype)
        metadata[key] = _value(cur, vtype, key, key in keep_arrays)

    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment is {alignment!r}; it must be a power of two")

    types = ggml_types()
    tensors, seen, expected = [], set(), 0
    for _ in range(n_tensors):
        info, offset = _tensor(cur, types)
        if info.name in seen:
            raise cur.fail(f"duplicate tensor name {info.name!r}")
        seen.add(info.name)
        # llama.cpp requires tensors to be packed in table order, each padded to the alignment
        if offset != expected:
            raise cur.fail(f"tensor {info.name!r} has data offset {offset}, expected {expected}")
        expected += -(-info.n_bytes // alignment) * alignment
        tensors.append(info)

    data_offset = -(-cur.pos // alignment) * alignment if tensors else cur.pos
    file_size = getattr(source, "file_size", None)
    if file_size is not None and tensors:
        end = data_offset + sum(-(-t.n_bytes // alignment) * alignment for t in tensors[:-1]) + tensors[-1].n_bytes
        if end > file_size:
            raise cur.fail(f"truncated: tensor data needs {end} bytes but the file has {file_size}",
                           hint="the download is incomplete; download it again")
    return GGUFHeader(version, metadata, tuple(tensors), alignment, data_offset, file_size, label, value_types)


def read_gguf_header(source: str | os.PathLike, *, max_bytes: int = MAX_BYTES, timeout_s: float = 30.0,
                     keep_arrays: Collection[str] = ()) -> GGUFHeader:
    """Read a GGUF header from a local path or an http(s) URL, touching at most `max_bytes` bytes."""
    src = open_source(source, timeout_s)
    try:
        return parse_gguf(src, max_bytes=max_bytes, label=os.fspath(source), keep_arrays=keep_arrays)
    finally:
        src.close()


def split_parts(source: str, count: int) -> list[str]:
    """The N part names of a split GGUF from its first part's name: llama.cpp's gguf-split writes
    PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf side by side (a path or a URL)."""
    import re

    m = re.match(r"^(.*)-00001-of-(\d{5})\.gguf$", source, re.IGNORECASE)
    if not m or int(m.group(2)) != count:
        raise FormatError(f"{source}: split.count is {count} but the name is not PREFIX-00001-of-{count:05d}.gguf",
                          hint="pass the first part of the split model under its gguf-split name")
    return [f"{m.group(1)}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def read_model_header(source: str | os.PathLike, **kwargs) -> GGUFHeader:
    """A model's header: one file's, or for a split model (split.count > 1, llama.cpp
    gguf-split) the first part's metadata with every part's tensors, so the weights of a 70B model
    split in five are counted whole. Each part is read within the same bounds as one file.

    A local file's header is read once per process while the file stays the same (its size and
    modification time): a run's checks, its traits and its plan all read the one header."""
    path = os.fspath(source)
    if not kwargs and "://" not in path:
        try:
            st = os.stat(path)
        except OSError:
            pass  # read_gguf_header names the problem
        else:
            return _local_model_header(path, st.st_size, st.st_mtime_ns)
    return _read_model_header(source, **kwargs)


@functools.lru_cache(maxsize=8)
def _local_model_header(path: str, size: int, mtime_ns: int) -> GGUFHeader:
    return _read_model_header(path)


def _read_model_header(source: str | os.PathLike, **kwargs) -> GGUFHeader:
    from dataclasses import replace

    first = read_gguf_header(source, **kwargs)
    count = first.metadata.get("split.count", 1)
    if not isinstance(count, int) or count <= 1:
        return first
    if first.metadata.get("split.no", 0) != 0:
        raise FormatError(f"{source} is part {first.metadata.get('split.no', 0) + 1} of a split model",
                          hint="pass its first part, NAME-00001-of-...gguf")
    tensors, size = list(first.tensors), first.file_size
    for part in split_parts(os.fspath(source), count)[1:]:
        h = read_gguf_header(part, **kwargs)
        tensors += h.tensors
        size = None if size is None or h.file_size is None else size + h.file_size
    claimed = first.metadata.get("split.tensors.count")
    if isinstance(claimed, int) and claimed != len(tensors):
        raise FormatError(f"{source}: the parts hold {len(tensors)} tensors, split.tensors.count says {claimed}",
                          hint="a part is missing or from another model; download the parts again")
    return replace(first, tensors=tuple(tensors), file_size=size)
