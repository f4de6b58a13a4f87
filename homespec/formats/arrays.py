"""A checkpoint's tensors as numpy arrays, without torch: safetensors files and torch zip checkpoints
(`pytorch_model.bin`, as the original EAGLE-3 heads ship).

* safetensors: the header is read (and checked) by homespec.formats.hf.read_safetensors_header; each
  tensor is a view of the memory-mapped file. `safetensors.numpy` cannot do this for BF16 (numpy has
  no bfloat16, and most published heads are BF16): BF16 is widened here to float32 (its bits are the
  high half of a float32's, so the widening is exact).
* torch zip (`torch.save` since 1.6): a zip of `data.pkl` and one file per storage. The pickle is
  read with an unpickler that knows only the few callables a tensor state dict needs
  (`torch._utils._rebuild_tensor_v2`, the storage classes, OrderedDict) and builds numpy views of
  the storages; anything else in the pickle is refused, so no code in the file runs.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from homespec.errors import FormatError
from homespec.formats.hf import read_safetensors_header

# safetensors dtype -> numpy dtype ("BF16" is widened by _widen_bf16)
_ST_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
             "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
             "U16": np.uint16, "U32": np.uint32, "U64": np.uint64}
# torch storage class -> numpy dtype
_TORCH_NUMPY = {"FloatStorage": np.float32, "HalfStorage": np.float16, "BFloat16Storage": np.uint16,
                "DoubleStorage": np.float64, "LongStorage": np.int64, "IntStorage": np.int32,
                "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
_TORCH_DTYPES = {"float32": "FloatStorage", "float16": "HalfStorage", "bfloat16": "BFloat16Storage",
                 "float64": "DoubleStorage", "int64": "LongStorage", "int32": "IntStorage", "int16": "ShortStorage",
                 "int8": "CharStorage", "uint8": "ByteStorage", "bool": "BoolStorage"}


def _widen_bf16(bits: np.ndarray) -> np.ndarray:
    """BF16 bit patterns (uint16) -> float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def read_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors or torch zip checkpoint file, BF16 as float32."""
    p = Path(path)
    if p.suffix == ".safetensors":
        return safetensors_arrays(p)
    return torch_zip_arrays(p)


def safetensors_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    entries = read_safetensors_header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, np.ndarray] = {}
    for e in entries:
        dtype = _ST_NUMPY.get(e.dtype)
        if dtype is None:
            raise FormatError(f"{path}: tensor {e.name!r} has dtype {e.dtype}, which homespec cannot read",
                              hint="convert the checkpoint to BF16, F16 or F32")
        a = raw[e.offset: e.offset + e.n_bytes].view(dtype).reshape(e.shape)
        out[e.name] = _widen_bf16(a) if e.dtype == "BF16" else a
    return out


class _Storage:
    """A storage named in the pickle, resolved to the bytes of its file in the zip."""

    def __init__(self, dtype: Any, key: str) -> None:
        self.dtype, self.key = dtype, key


class _TensorUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str, where: Path) -> None:
        super().__init__(file)
        self._zip, self._prefix, self._where = archive, prefix, where
        self._storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return self._rebuild
        if module == "torch" and name in _TORCH_NUMPY:
            return _TORCH_NUMPY[name]
        raise FormatError(f"{self._where}: the checkpoint's pickle names {module}.{name}, which a tensor "
                          "state dict does not hold; it was not read", hint="convert the head to safetensors")

    def persistent_load(self, pid: Any) -> Any:
        # ("storage", storage type, key, location, numel)
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
            raise FormatError(f"{self._where}: unknown persistent id in the checkpoint", hint="convert the head to safetensors")
        dtype = pid[1]
        if not isinstance(dtype, type):  # torch >= 2.x pickles a dtype object for untyped storages
            dtype = _TORCH_NUMPY[_TORCH_DTYPES[str(dtype).removeprefix("torch.")]]
        return _Storage(dtype, str(pid[2]))

    def _array(self, storage: _Storage) -> np.ndarray:
        if storage.key not in self._storages:
            data = self._zip.read(f"{self._prefix}data/{storage.key}")
            self._storages[storage.key] = np.frombuffer(data, dtype=storage.dtype)
        return self._storages[storage.key]

    def _rebuild(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> np.ndarray:
        flat = self._array(storage)
        item = flat.itemsize
        a = np.lib.stride_tricks.as_strided(flat[offset:], shape=tuple(size), strides=tuple(s * item for s in stride))
        a = np.array(a)  # own its memory, contiguous
        return _widen_bf16(a) if storage.dtype is np.uint16 else a


def torch_zip_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    p = Path(path)
    try:
        archive = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FormatError(f"{p}: not a torch zip checkpoint ({exc})", hint="re-save it with torch.save, or as safetensors") from None
    with archive:
        pkl = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if not pkl:
            raise FormatError(f"{p}: no data.pkl in the checkpoint", hint="re-save it with torch.save, or as safetensors")
        prefix = pkl[0][: -len("data.pkl")]
        with archive.open(pkl[0]) as f:
            try:
                state = _TensorUnpickler(f, archive, prefix, p).load()
            except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError) as exc:
                raise FormatError(f"{p}: cannot read the checkpoint ({exc})", hint="download it again") from None
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise FormatError(f"{p}: not a state dict of tensors", hint="save the head's state_dict(), or as safetensors")
    return dict(state)
