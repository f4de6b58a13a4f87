"""GGUF header reader: the real SmolLM2 file, tiny written files, hostile bytes, HTTP ranges."""

from __future__ import annotations

import functools
import http.server
import struct
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homespec.errors import FormatError, HomespecError, UsageError
from homespec.formats.gguf import ArrayInfo, file_type_name, parse_gguf, read_gguf_header
from homespec.formats.gguf_model import draft_spec_from_gguf, model_spec_from_gguf

Q = gguf.GGMLQuantizationType


def write_gguf(path: Path, arch: str = "llama", *, n_layer: int = 2, n_embd: int = 256, n_head: int = 4,
               n_head_kv: int = 2, n_ff: int = 512, n_vocab: int = 320, tied: bool = False,
               wtype=Q.Q4_K, extra=None, tensors_extra=None) -> Path:
    """A tiny but complete GGUF: llama-style metadata, tensors of the given type (zero bytes)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_token_list([f"t{i}".encode() for i in range(n_vocab)])
    for key, value in (extra or {}).items():
        w.add_key_value(key, value[0], value[1]) if isinstance(value, tuple) else w.add_uint32(key, value)

    def add(name, shape, qtype):  # shape in ggml order (ne0 first)
        blk, size = gguf.GGML_QUANT_SIZES[qtype]
        rows = tuple(reversed(shape[1:]))  # the writer takes bytes shaped [..., bytes per row]
        w.add_tensor(name, np.zeros((*rows, shape[0] // blk * size), dtype=np.uint8), raw_dtype=qtype)

    add("token_embd.weight", (n_embd, n_vocab), Q.Q8_0)
    add("output_norm.weight", (n_embd,), Q.F32)
    if not tied:
        add("output.weight", (n_embd, n_vocab), Q.Q6_K)
    hd = n_embd // n_head
    for i in range(n_layer):
        add(f"blk.{i}.attn_norm.weight", (n_embd,), Q.F32)
        add(f"blk.{i}.attn_q.weight", (n_embd, n_embd), wtype)
        add(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * hd), wtype)
        add(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * hd), Q.Q6_K)
        add(f"blk.{i}.attn_output.weight", (n_embd, n_embd), wtype)
        add(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), wtype)
        add(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), wtype)
        add(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), Q.Q6_K)
        add(f"blk.{i}.ffn_norm.weight", (n_embd,), Q.F32)
    for name, shape, qtype in tensors_extra or ():
        add(name, shape, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def assert_same_as_gguf_reader(path: Path) -> None:
    """Our sizes, shapes, types and offsets against the gguf package's full reader."""
    ours = read_gguf_header(path)
    ref = gguf.GGUFReader(str(path))
    assert len(ours.tensors) == len(ref.tensors)
    for a, b in zip(ref.tensors, ours.tensors):
        assert (a.name, int(a.n_bytes), a.tensor_type.name) == (b.name, b.n_bytes, b.ggml_type)
        assert tuple(int(x) for x in a.shape) == b.shape
    assert ours.data_offset == ref.data_offset
    assert ours.file_size == path.stat().st_size


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def tiny_bytes(tiny) -> bytes:
    return tiny.read_bytes()


# --- the real file --------------------------------------------------------------------------


@pytest.mark.slow  # gguf.GGUFReader walks the 49k-token arrays in Python: ~15 s
def test_smollm2_header_matches_gguf_reader(smollm2_path):
    assert_same_as_gguf_reader(smollm2_path)


def test_smollm2_model_spec(smollm2_path):
    header = read_gguf_header(smollm2_path)
    assert header.version == 3 and header.alignment == 32
    assert header.metadata["tokenizer.ggml.tokens"] == ArrayInfo("STRING", 49152)
    spec = model_spec_from_gguf(header)
    assert (spec.arch, spec.n_layer, spec.n_embd, spec.n_vocab) == ("llama", 30, 576, 49152)
    assert (spec.n_head, spec.n_head_kv, spec.head_dim, spec.n_ff, spec.n_ctx_train) == (9, 3, 64, 1536, 8192)
    assert spec.quant == "Q4_1" and spec.tied_embeddings and spec.format == "gguf"
    assert spec.file_bytes == smollm2_path.stat().st_size
    # the tensor data section ends exactly at the end of the file
    last = spec.tensors[-1]
    assert header.data_offset + sum(-(-t.n_bytes // 32) * 32 for t in spec.tensors[:-1]) + last.n_bytes \
        == spec.file_bytes
    assert {t.layer for t in spec.tensors if t.name.startswith("blk.")} == set(range(30))
    assert spec.n_params == 134_515_008  # SmolLM2-135M


def test_keep_arrays_returns_the_whole_token_list(smollm2_path):
    header = read_gguf_header(smollm2_path, keep_arrays={"tokenizer.ggml.tokens"})
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == 49152 and tokens[1] == "<|im_start|>"


# --- tiny written files -----------------------------------------------------------------------


@pytest.mark.parametrize("wtype", [Q.Q4_K, Q.Q5_0, Q.IQ4_XS, Q.Q8_0, Q.BF16, Q.F16, Q.MXFP4, Q.IQ2_XXS])
def test_tensor_bytes_match_gguf_reader(tmp_path, wtype):
    assert_same_as_gguf_reader(write_gguf(tmp_path / "m.gguf", wtype=wtype))


def test_block_sizes_follow_ggml_not_stale_gguf_py_entries():
    """Block sizes come from homespec.quant.tables; gguf-py's table differs only on Q8_1 (40 vs ggml's 36)."""
    from homespec.formats.gguf import ggml_types
    from homespec.quant.tables import GGML_TYPES

    ours = {name: (blk, size) for name, blk, size in ggml_types().values()}
    differ = {name for name, sizes in GGML_TYPES.items() if name in ours and ours[name] != sizes}
    assert not differ
    stale = {t.name for t in Q if t in gguf.GGML_QUANT_SIZES and gguf.GGML_QUANT_SIZES[t] != ours[t.name]}
    assert stale <= {"Q8_1"}
    assert ours["Q8_1"] == (32, 36) and ours["Q4_1"] == (32, 20) and ours["IQ2_XXS"] == (256, 66)


def test_tiny_model_spec(tiny):
    spec = model_spec_from_gguf(read_gguf_header(tiny), name="tiny")
    assert (spec.name, spec.n_layer, spec.n_embd, spec.n_head, spec.n_head_kv, spec.head_dim) == ("tiny", 2, 256, 4, 2, 64)
    assert spec.n_vocab == 320 and not spec.tied_embeddings and spec.quant == "Q4_K_M"
    assert spec.sliding_window is None and spec.rope_theta == 10000.0


def test_per_layer_head_counts_and_gemma2_window(tmp_path):
    path = write_gguf(tmp_path / "g.gguf", "gemma2", n_layer=4, tied=True,
                      extra={"gemma2.attention.sliding_window": 128,
                             "gemma2.attention.head_count_kv": ([1, 2, 1, 2], gguf.GGUFValueType.ARRAY),
                             "gemma2.attention.key_length": 96})
    # GGUFWriter already wrote a scalar head_count_kv; rewrite with the per-layer key only
    spec = model_spec_from_gguf(read_gguf_header(path))
    assert spec.arch == "gemma2" and spec.tied_embeddings
    assert spec.sliding_window == 128 and spec.swa_layers == (0, 2)  # llama.cpp: il % 2 < 1
    assert spec.head_dim == 96


def test_eagle3_gguf_draft_spec(tmp_path):
    n_embd, target_hidden = 256, 384
    path = write_gguf(tmp_path / "e.gguf", "eagle3", n_layer=1, n_embd=n_embd, n_vocab=1000,
                      extra={"eagle3.target_hidden_size": target_hidden,
                             "eagle3.target_layers": ([2, 8, 13], gguf.GGUFValueType.ARRAY)},
                      tensors_extra=[("fc.weight", (3 * target_hidden, n_embd), Q.F16), ("d2t", (512,), Q.I64)])
    header = read_gguf_header(path)
    draft = draft_spec_from_gguf(header)
    assert draft.kind == "eagle3" and draft.target_hidden == target_hidden and draft.n_layer == 1
    assert draft.draft_vocab == 512 and draft.target_vocab == 1000
    assert draft.weight_bytes == header.tensor_bytes
    from homespec.formats.gguf_model import target_layers

    assert target_layers(header) == (2, 8, 13)
    with pytest.raises(FormatError):
        draft_spec_from_gguf(read_gguf_header(write_gguf(tmp_path / "m.gguf")))


def test_file_type_names():
    assert file_type_name(15) == "Q4_K_M" and file_type_name(0) == "F32" and file_type_name(999) is None


# --- hostile input --------------------------------------------------------------------------


def _parse(data: bytes, max_bytes: int = 64 * 1024 * 1024):
    class Src:
        file_size = len(data)

        def __init__(self):
            self.pos = 0

        def read(self, n):
            out = data[self.pos:self.pos + n]
            self.pos += len(out)
            return out

    return parse_gguf(Src(), max_bytes=max_bytes, label="test.gguf")


PAD = b"\0" * 64  # room for the counts' plausibility check, so the specific check is the one that fires


def _header(version=3, n_tensors=0, n_kv=0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


@pytest.mark.parametrize("data, words", [
    (b"<!DOCTYPE html><html>", "not a GGUF file"),
    (b"", "not a GGUF file"),
    (b"GGUF" + struct.pack("<I", 3 << 24), "byte-swapped"),
    (_header(version=1), "version 1"),
    (_header(version=4), "version 4"),
    (_header(n_kv=10**12), "claims 1000000000000 metadata pairs"),
    (_header(n_tensors=2**63), "tensors"),
    (_header(n_kv=1) + struct.pack("<Q", 10 * 2**30) + PAD, "10737418240-byte string"),
    (_header(n_kv=1) + _kv(b"a", 99, PAD), "unknown value type 99"),
    (_header(n_kv=1) + _kv(b"a", 9, struct.pack("<IQ", 9, 1) + PAD), "array of arrays"),
    (_header(n_kv=1) + _kv(b"a", 9, struct.pack("<IQ", 4, 2**40) + PAD), "claims 1099511627776 elements"),
    (_header(n_kv=1) + _kv(b"a", 9, struct.pack("<IQ", 77, 1) + PAD), "unknown element type"),
    (_header(n_kv=2) + _kv(b"a", 4, b"\1\0\0\0") * 2 + PAD, "duplicate metadata key"),
    (_header(n_kv=1) + _kv(b"general.alignment", 4, struct.pack("<I", 24)) + PAD, "power of two"),
    (_header(n_tensors=1) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 5) + b"\0" * 60, "5 dimensions"),
    (_header(n_tensors=1) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQQ", 2, 2**62, 2**62) + b"\0" * 12,
     "overflows int64"),
    (_header(n_tensors=1) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 200, 0), "unknown ggml type 200"),
    (_header(n_tensors=1) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 30, 2, 0), "not a multiple"),
    (_header(n_tensors=1) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 64), "expected 0"),
    (_header(n_tensors=1) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 0), "truncated"),
])
def test_hostile_headers_are_format_errors(data, words):
    with pytest.raises(FormatError) as err:
        _parse(data)
    assert words in err.value.message and err.value.hint
    assert "\n" not in err.value.message


def test_truncated_data_section_is_reported(tiny_bytes):
    with pytest.raises(FormatError, match="tensor data needs") as err:
        _parse(tiny_bytes[:-100])
    assert "download" in err.value.hint


def test_max_bytes_caps_the_read(tiny_bytes):
    with pytest.raises(FormatError, match="100-byte header limit"):
        _parse(tiny_bytes, max_bytes=100)


@pytest.mark.slow  # ~5 s: 300 mutated headers
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_mutations_never_escape_as_other_exceptions(tiny_bytes, data):
    """Random byte flips and truncations of a real header: a header or a FormatError, nothing else."""
    header_end = _parse(tiny_bytes).data_offset
    buf = bytearray(tiny_bytes)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, header_end - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.just(len(buf)), st.integers(0, len(buf))))
    try:
        _parse(bytes(buf[:cut]))
    except FormatError as e:
        assert e.hint and "\n" not in e.message


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_random_bytes_after_magic(tail):
    try:
        _parse(b"GGUF" + tail)
    except FormatError:
        pass


# --- URLs -------------------------------------------------------------------------------------


class _Handler(http.server.SimpleHTTPRequestHandler):
    ranges = True  # class attribute switched per server
    log = []

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        self.log.append((self.path, self.headers.get("Range")))
        if self.path == "/page.html":
            body = b"<!DOCTYPE html><html><body>model card</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/redirect.gguf":
            self.send_response(302)
            self.send_header("Location", "/files/tiny.gguf")
            self.end_headers()
            return
        if self.path.startswith("/files/"):
            target = Path(self.directory) / self.path.removeprefix("/files/")
            data = target.read_bytes() if target.is_file() else None
            if data is None:
                self.send_error(404)
                return
            rng = self.headers.get("Range")
            if rng and self.ranges:
                start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
                end = min(end, len(data) - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.send_header("Content-Length", str(end - start + 1))
                self.end_headers()
                self.wfile.write(data[start:end + 1])
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stops reading once it has the header
            return
        self.send_error(404)


@pytest.fixture(params=[True, False], ids=["range", "no-range"])
def server(request, tiny, smollm2_path):
    folder = tiny.parent
    (folder / "smol.gguf").unlink(missing_ok=True)
    (folder / "smol.gguf").symlink_to(smollm2_path)
    handler = type("H", (_Handler,), {"ranges": request.param, "log": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def test_url_header_equals_local_header(server, smollm2_path):
    base, handler = server
    remote = read_gguf_header(f"{base}/files/smol.gguf")
    local = read_gguf_header(smollm2_path)
    assert remote.tensors == local.tensors and remote.data_offset == local.data_offset
    assert remote.file_size == smollm2_path.stat().st_size
    if handler.ranges:  # a 1.8 MB header in a few growing range requests, never the 98 MB file
        assert 1 <= len(handler.log) <= 5 and all(r for _, r in handler.log)


def test_url_reads_stop_at_max_bytes(server):
    """With or without Range support the reader stops at max_bytes (SmolLM2's header is 1.79 MB)."""
    base, handler = server
    with pytest.raises(FormatError, match="1000000-byte header limit"):
        read_gguf_header(f"{base}/files/smol.gguf", max_bytes=1_000_000)


def test_url_redirect_404_and_html(server):
    base, _ = server
    assert read_gguf_header(f"{base}/redirect.gguf").tensors
    with pytest.raises(UsageError, match="HTTP 404"):
        read_gguf_header(f"{base}/files/missing.gguf")
    with pytest.raises(FormatError, match="not a GGUF file"):
        read_gguf_header(f"{base}/page.html")


def test_network_is_refused_for_non_loopback_hosts(monkeypatch):
    monkeypatch.setenv("HOMESPEC_NO_NETWORK", "1")
    with pytest.raises(UsageError, match="network access is disabled"):
        read_gguf_header("https://huggingface.co/x/y/resolve/main/m.gguf")


def test_missing_local_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        read_gguf_header(tmp_path / "nope.gguf")
    with pytest.raises(HomespecError):
        read_gguf_header(tmp_path)


def test_a_model_header_is_read_once_while_the_file_is_unchanged(tmp_path):
    """read_model_header keeps a local file's header (a run's checks, traits and plan read one); a
    rewritten file (another size or modification time) is read again, and a URL or bounds are never kept."""
    import os

    from homespec.formats.gguf import read_model_header

    path = write_gguf(tmp_path / "m.gguf", n_layer=2)
    first = read_model_header(path)
    assert read_model_header(path) is first
    assert read_model_header(path, max_bytes=1 << 26) is not first  # explicit bounds: read as asked
    write_gguf(path, n_layer=3)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later time, even on a coarse clock
    again = read_model_header(path)
    assert again is not first and again.metadata["llama.block_count"] == 3
