"""The catalogue: GPUs, models and draft heads from profiles/*.toml, resolved by forgiving names.

`--gpu "RTX 4090"`, `--model llama-3.1-70b-q4` and `--draft yuhuili/EAGLE3-LLaMA3.1-Instruct-8B` all
end here. Model entries carry architecture numbers only; the quantised tensors are predicted on
resolution (homespec.quant.predict), so one entry serves every GGUF file type and EXL2 bit rate.

Pure: tomllib only, no torch (the planner and `homespec plan` import this).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from functools import cache

from homespec.draft_specs import derived_draft, draft_names, draft_spec, mtp_draft
from homespec.errors import HomespecError, UsageError
from homespec.formats.families import CATALOGUE_KEYS, complete
from homespec.quant.exl2 import exl2_tensors
from homespec.quant.names import normalize_quant
from homespec.quant.predict import predict_tensors
from homespec.quant.shapes import n_params
from homespec.quant.tables import FILE_TYPES, profiles_dir
from homespec.types import GPU, DraftSpec, ModelSpec

__all__ = ["Catalog", "DEFAULT_QUANT", "ModelEntry", "PublishedFile", "derived_draft", "load_catalog", "mtp_draft"]

DEFAULT_QUANT = "Q4_K_M"
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class PublishedFile:
    """A GGUF someone published for the model ([[model.file]]): its exact size beats a prediction."""

    quant: str  # as published: "Q4_K_M", "UD-Q4_K_XL", "MXFP4"
    bytes: int  # all shards together
    repo: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One catalogue model: its architecture, unquantised."""

    id: str
    spec: ModelSpec  # quant None, tensors None
    keys: tuple[str, ...]  # normalised names that resolve to it
    files: tuple[PublishedFile, ...] = ()


def _norm_model(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.strip().lower())


def _model_keys(entry: dict) -> tuple[str, ...]:
    base = [entry["id"], entry["name"], *entry.get("aliases", [])]
    keys = set()
    for k in map(_norm_model, base):
        # "llama-3.1-8b" <-> "llama3.1-8b", "qwen2.5-7b" <-> "qwen-2.5-7b"
        for v in (k, re.sub(r"^([a-z]+)-(\d)", r"\1\2", k), re.sub(r"^([a-z]+)(\d)", r"\1-\2", k)):
            keys |= {v, v + "-instruct", v + "-it"}
    return tuple(sorted(keys, key=len, reverse=True))


def _norm_gpu(text: str) -> str:
    s = text.strip().lower()
    s = re.sub(r"\b(nvidia|geforce|apple)\b", "", s)
    s = re.sub(r"[\s\-_()]+", "", s)
    return re.sub(r"(\d)g(b)?$", r"\1", s)  # "512gb", "12g" -> the number


def _nearest(key: str, spellings: dict[str, str]) -> str:
    """A hint naming catalogue entries as the catalogue spells them.

    `key` is the user's text after the same normalisation as the lookup; `spellings` maps each
    normalised lookup key to its entry's own id ("m3ultra96" -> "m3-ultra-96"). Matching runs on
    the normalised keys (so "m3 ultra 96gb" is near), the hint shows ids, each entry once."""
    near = difflib.get_close_matches(key, list(spellings), n=12, cutoff=0.4)
    names = list(dict.fromkeys(spellings[k] for k in near))[:3]
    if names:
        return "nearest: " + ", ".join(names)
    known = sorted(set(spellings.values()))
    return "known: " + ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")


class Catalog:
    """Everything in profiles/, loaded once (see load_catalog)."""

    def __init__(self, gpus: tuple[GPU, ...], gpu_keys: dict[str, GPU], models: tuple[ModelEntry, ...],
                 drafts: tuple[dict, ...], gpu_ids: dict[str, str] | None = None,
                 base_notes: dict[str, str] | None = None):
        self._gpus = gpus
        self._base_notes = base_notes or {}  # normalised bare chip name -> what it was taken for
        self._gpu_keys = gpu_keys
        self._gpu_ids = gpu_ids or {g.name: g.name for g in gpus}  # GPU name -> catalogue id
        self._models = models
        self._drafts = drafts

    # --- GPUs -----------------------------------------------------------------------------------
    @property
    def gpus(self) -> tuple[GPU, ...]:
        return self._gpus

    def gpu(self, name: str) -> GPU:
        """A GPU by name or alias: "4090", "RTX 4090", "3090ti", "a6000", "m3-ultra-512"."""
        key = _norm_gpu(name)
        found = self._gpu_keys.get(key) or self._gpu_keys.get(key.removeprefix("rtx"))
        if found is None:
            spellings = {k: self._gpu_ids[g.name] for k, g in self._gpu_keys.items()}
            raise UsageError(f"unknown GPU '{name}'", hint=_nearest(key, spellings))
        return found

    def base_note(self, name: str) -> str | None:
        """For a chip named without its memory size (`m3-ultra`): which configuration it was taken
        for, and the names of the others (None for every other name)."""
        note = self._base_notes.get(_norm_gpu(name))
        return None if note is None else f"--gpu {name.strip()}: {note}"

    def gpu_id(self, gpu: GPU) -> str | None:
        """The catalogue's id for a GPU it lists ("rtx-4090", "m3-ultra-512"), else None."""
        return self._gpu_ids.get(gpu.name)

    # --- models ---------------------------------------------------------------------------------
    @property
    def models(self) -> tuple[str, ...]:
        return tuple(e.id for e in self._models)

    def entry(self, name: str) -> ModelEntry:
        key = _norm_model(name)
        for e in self._models:
            if key in e.keys:
                return e
        raise UsageError(f"unknown model '{name}'", hint=_nearest(key, self._model_spellings()))

    def _model_spellings(self) -> dict[str, str]:
        return {k: e.id for e in self._models for k in e.keys}

    def model(self, name: str) -> ModelSpec:
        """A model with its quantisation: "llama-3.1-70b-q4", "qwen2.5-7b-q8", "mistral-7b-exl2-4.65".

        Without a quant suffix the model is Q4_K_M. Tensors are predicted per llama.cpp's quantiser
        (or exllamav2's layout for EXL2), so `sum(t.n_bytes)` is the weights' size.
        """
        key = _norm_model(name)
        best: tuple[ModelEntry, str] | None = None
        for e in self._models:
            for k in e.keys:  # longest keys first within an entry
                if (key == k or key.startswith(k + "-")) and (best is None or len(k) > len(best[1])):
                    best = (e, k)
                    break
        if best is None:
            raise UsageError(f"unknown model '{name}'", hint=_nearest(key, self._model_spellings()))
        entry, k = best
        rest = key[len(k) + 1:].removeprefix("instruct-").removeprefix("it-")
        published = _published_file(entry, rest)
        if published is not None:
            return self.published(entry, published)
        quant = normalize_quant(rest) if rest else DEFAULT_QUANT
        return self.quantised(entry, quant)

    def published(self, entry: ModelEntry, f: PublishedFile) -> ModelSpec:
        """A published file: the tensors of the nearest llama.cpp file type, scaled to the file's exact size
        (a dynamic mix such as UD-Q4_K_XL spends its bits differently per tensor; the total is what counts)."""
        base = _base_ftype(f.quant)
        spec = self.quantised(entry, base)
        predicted = sum(t.n_bytes for t in spec.tensors or ())
        scale = f.bytes / predicted if predicted else 1.0
        tensors = tuple(_replace(t, n_bytes=int(t.n_bytes * scale)) for t in spec.tensors or ())
        where = f" — {f.repo}" if f.repo else ""
        return _replace(spec, name=f"{entry.id}-{f.quant.lower()}", quant=f.quant, tensors=tensors, file_bytes=f.bytes,
                        source=f"{spec.source}; {f.quant} file size {f.bytes:,} bytes{where} ({f.source or 'published'}), "
                               f"tensors shaped as {base}")

    def quantised(self, entry: ModelEntry, quant: str) -> ModelSpec:
        quant = normalize_quant(quant)
        spec = entry.spec
        if quant.startswith("EXL2-"):
            tensors = exl2_tensors(spec, float(quant.removeprefix("EXL2-")))
            fmt_quant = "exl2-" + quant.removeprefix("EXL2-")
        else:
            tensors = predict_tensors(spec, quant)
            fmt_quant = quant
        return _replace(spec, name=f"{entry.id}-{fmt_quant.lower()}", quant=fmt_quant, tensors=tensors)

    # --- drafts ---------------------------------------------------------------------------------
    @property
    def drafts(self) -> tuple[str, ...]:
        return tuple(d["id"] for d in self._drafts)

    @property
    def draft_entries(self) -> tuple[dict, ...]:
        """profiles/drafts.toml's [[draft]] tables as written, in order of preference."""
        return self._drafts

    def draft_entry(self, name: str) -> dict | None:
        """The [[draft]] table `name` resolves to (as `draft` resolves it), or None."""
        key = _norm_model(name)
        for d in self._drafts:
            if key in {_norm_model(n) for n in draft_names(d)}:
                return d
        return None

    def target_entry(self, draft: dict) -> ModelEntry | None:
        """The catalogue model a [[draft]] is made for (its first target)."""
        for e in self._models:
            if e.id == draft["targets"][0]:
                return e
        return None

    def draft(self, name: str) -> DraftSpec:
        """A draft head by id, Hugging Face repo, "eagle3-<model>" or "homespec-eagle3.1-<model>"."""
        key = _norm_model(name)
        found = self.draft_entry(name)
        if found is not None:
            return draft_spec(found, found["targets"][0])
        if key.startswith("homespec-eagle3.1-"):
            return derived_draft(self.entry(key.removeprefix("homespec-eagle3.1-")).spec)
        spellings = {_norm_model(n): d["id"] for d in self._drafts for n in draft_names(d)}
        raise UsageError(f"unknown draft '{name}'", hint=_nearest(key, spellings))

    def draft_for(self, model: ModelSpec) -> DraftSpec | None:
        """The default pairing: the published EAGLE-3 head for the family, else a trainable EAGLE-3.1 head."""
        paired = self.paired_draft(model)
        if paired is not None:
            return paired
        if model.n_nextn_layer:  # the model ships its own draft: its MTP layers
            return mtp_draft(model)
        if model.n_layer < 4:  # features come from layers 2, N/2 and N-3: too shallow to draft
            return None
        return derived_draft(model)

    def paired_draft(self, model: ModelSpec) -> DraftSpec | None:
        """The head profiles/drafts.toml pairs with the model's family, if any (no derived head)."""
        if model.family:
            for d in self._drafts:
                if model.family in d["targets"]:
                    return draft_spec(d, model.family)
        return None


def _published_file(entry: ModelEntry, rest: str) -> PublishedFile | None:
    """The entry's published file whose quant name is `rest` ("ud-q4-k-xl" -> UD-Q4_K_XL); a plain llama.cpp
    file type is predicted instead unless no prediction exists for it (MXFP4 is the gpt-oss file type)."""
    if not rest:
        return None
    want = re.sub(r"[-_]", "", rest.lower())
    for f in entry.files:
        if re.sub(r"[-_]", "", f.quant.lower()) == want:
            try:
                normalize_quant(f.quant)
                return None if f.quant.upper() in FILE_TYPES else f
            except UsageError:
                return f
    return None


def _base_ftype(quant: str) -> str:
    """The llama.cpp file type a published mix is closest to: UD-Q4_K_XL -> Q4_K_M, UD-IQ2_XXS -> IQ2_XXS."""
    q = quant.upper().removeprefix("UD-")
    q = re.sub(r"_XL$", "_M", q)
    try:
        return normalize_quant(q)
    except UsageError:
        return DEFAULT_QUANT


def _replace(spec: ModelSpec, **changes) -> ModelSpec:
    import dataclasses

    return dataclasses.replace(spec, **changes)


def _model_spec(m: dict) -> ModelSpec:
    """A catalogue entry's shape; the MoE / MLA / hybrid / MTP keys (docs/catalogue.md) are optional."""
    p = m.get("swa_pattern")
    swa = tuple(i for i in range(m["n_layer"]) if i % p < p - 1) if p else ()
    if m.get("sliding_window") and not p:
        swa = tuple(range(m["n_layer"]))  # a window without a pattern: every layer (Mistral v0.1)
    family = {k: m[k] for k in CATALOGUE_KEYS if m.get(k) is not None}
    spec = ModelSpec(
        name=m["id"], arch=m["arch"], n_layer=m["n_layer"], n_embd=m["n_embd"], n_head=m["n_head"],
        n_head_kv=m["n_head_kv"], head_dim=m["head_dim"], n_ff=m["n_ff"], n_vocab=m["n_vocab"],
        n_ctx_train=m["n_ctx_train"], tied_embeddings=m["tied"], rope_theta=m.get("rope_theta"),
        sliding_window=m.get("sliding_window"), swa_layers=swa, source=m["source"], family=m["id"],
        format="catalogue", **family,
    )
    spec = complete(spec)
    if m.get("n_params"):
        return _replace(spec, n_params=m["n_params"])
    try:
        return _replace(spec, n_params=n_params(spec))
    except HomespecError:  # an architecture whose tensors homespec cannot predict: say so when it is planned
        return spec


def _apple_gpus(a: dict) -> list[tuple[GPU, list[str]]]:
    out = []
    for mem in a["memory_gib"]:
        gid = f"{a['chip'].lower().replace(' ', '-')}-{mem}"
        gpu = GPU(name=f"Apple {a['chip']} ({mem} GB)", vendor="apple", total_bytes=mem * _GIB,
                  bandwidth_gbs=a["bandwidth_gbs"], unified=True, fp16_tflops=a.get("fp16_tflops"),
                  source="catalogue")
        out.append((gpu, [gid]))
    return out


def _unified_gpus(u: dict) -> list[tuple[GPU, list[str]]]:
    """A [[unified]] machine that is not a Mac (Strix Halo, DGX Spark): its GPU shares the machine's
    RAM, one GPU per memory option, id "<chip>-<memory>"; with one option the bare aliases resolve too."""
    out = []
    for mem in u["memory_gib"]:
        gid = f"{u['chip'].lower().replace(' ', '-')}-{mem}"
        name = f"{u['name'][:-1]}, {mem} GB)" if u["name"].endswith(")") else f"{u['name']} ({mem} GB)"
        gpu = GPU(name=name, vendor=u["vendor"], total_bytes=mem * _GIB,
                  bandwidth_gbs=u["bandwidth_gbs"], unified=True, compute_capability=u.get("compute_capability"),
                  fp16_tflops=u.get("fp16_tflops"), source="catalogue")
        bare = u.get("aliases", []) if len(u["memory_gib"]) == 1 else []
        out.append((gpu, [gid, *(f"{a}-{mem}" for a in u.get("aliases", [])), *bare]))
    return out


def _base_configurations(g: dict) -> dict[str, tuple[GPU, str]]:
    """A chip sold with several memory sizes named without one (`m3-ultra`, `m4-max`): its base
    configuration, the least memory any of its variants is sold with (what a buyer gets unless they
    pay for more), and the note that says so and names the others. -> {bare id: (GPU, note)}"""
    chips: dict[str, list[tuple[int, GPU, str]]] = {}
    kinds = [(a, _apple_gpus) for a in g.get("apple", [])] + [(u, _unified_gpus) for u in g.get("unified", [])]
    for entry, make in kinds:
        bare = entry["chip"].lower().replace(" ", "-")
        for mem, (gpu, names) in zip(entry["memory_gib"], make(entry)):
            chips.setdefault(bare, []).append((mem, gpu, names[0]))
    out = {}
    for bare, options in chips.items():
        ids = list(dict.fromkeys(i for _, _, i in sorted(options, key=lambda o: o[0])))
        if len(ids) < 2:
            continue  # one memory size: the bare name is that machine already (or an alias)
        mem, gpu, gid = min(options, key=lambda o: o[0])
        others = [i for i in ids if i != gid]
        more = " or ".join([", ".join(others[:-1]), others[-1]] if len(others) > 1 else others)
        out[bare] = (gpu, f"the base configuration, {gid} ({mem} GB); name {more} for more memory")
    return out


@cache
def load_catalog() -> Catalog:
    """Read profiles/gpus.toml ([[gpu]], [[apple]], [[unified]]), profiles/models/*.toml and
    profiles/drafts.toml (once per process)."""
    root = profiles_dir()
    with open(root / "gpus.toml", "rb") as f:
        g = tomllib.load(f)
    pairs: list[tuple[GPU, list[str]]] = []
    for e in g.get("gpu", []):
        gpu = GPU(name=e["name"], vendor=e["vendor"], total_bytes=int(e["memory_gib"] * _GIB),
                  bandwidth_gbs=e["bandwidth_gbs"], compute_capability=e.get("compute_capability"),
                  fp16_tflops=e.get("fp16_tflops"), source="catalogue")
        pairs.append((gpu, [e["id"], e["name"], *e.get("aliases", [])]))
    for a in g.get("apple", []):
        pairs += _apple_gpus(a)
    for u in g.get("unified", []):
        pairs += _unified_gpus(u)
    bases = _base_configurations(g)
    pairs += [(gpu, [bare]) for bare, (gpu, _) in bases.items()]
    gpu_keys: dict[str, GPU] = {}
    gpu_ids: dict[str, str] = {}
    for gpu, names in pairs:
        gpu_ids.setdefault(gpu.name, names[0])
        for n in names:
            k = _norm_gpu(n)
            gpu_keys.setdefault(k, gpu)
            gpu_keys.setdefault(k.removeprefix("rtx"), gpu)
    models = []
    for path in sorted((root / "models").glob("*.toml")):
        with open(path, "rb") as f:
            for m in tomllib.load(f).get("model", []):
                files = tuple(PublishedFile(f["quant"], int(f["bytes"]), f.get("repo", ""), f.get("source", ""))
                              for f in m.get("file", []))
                models.append(ModelEntry(m["id"], _model_spec(m), _model_keys(m), files))
    with open(root / "drafts.toml", "rb") as f:
        drafts = tuple(tomllib.load(f).get("draft", []))
    gpus = tuple(dict.fromkeys(p[0] for p in pairs))
    return Catalog(gpus, gpu_keys, tuple(models), drafts, gpu_ids,
                   {_norm_gpu(bare): note for bare, (_, note) in bases.items()})
