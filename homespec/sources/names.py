"""How a model is named on the command line, parsed without touching the disk or the network.

Spellings (docs/cli.md "Naming a model"):

  org/repo[:QUANT]                    a Hugging Face repo; the GGUF is picked by QUANT (pick.py)
  org/repo/dir/file.gguf              one file of a Hugging Face repo
  hf.co/org/repo[...], huggingface.co/org/repo[...]   the same, written as on the web
  https://huggingface.co/org/repo[/resolve|blob/REV/file.gguf]   a hub URL (also under HF_ENDPOINT)
  ollama:NAME[:TAG]                   a model pulled with `ollama pull` (NAME may be ns/name or host/ns/name)
  lmstudio:PUBLISHER/REPO[/file.gguf][:QUANT]   a model in LM Studio's models folder

Anything else (an existing path, a catalogue name, another URL) is not a source name: parse() gives None.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass

from homespec.errors import UsageError
from homespec.formats.http import hub_endpoint

# Hugging Face repo names: letters, digits, '-', '_', '.'; no '--' or '..' (huggingface_hub
# utils/_validators.py REPO_ID_REGEX); at most 96 characters.
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO = re.compile(rf"^({_PART})/({_PART})$")
_TAG = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HF_HOSTS = ("hf.co", "huggingface.co", "www.huggingface.co")


@dataclass(frozen=True, slots=True)
class HubRef:
    """A Hugging Face repo, with a file in it or a quant tag to pick one by."""

    repo: str
    file: str | None = None
    tag: str | None = None
    revision: str = "main"

    def __str__(self) -> str:
        if self.file:
            return f"{self.repo}/{self.file}"
        return self.repo + (f":{self.tag}" if self.tag else "")


@dataclass(frozen=True, slots=True)
class OllamaRef:
    """An Ollama model name: host/namespace/model:tag, with Ollama's defaults filled in."""

    host: str
    namespace: str
    model: str
    tag: str

    def __str__(self) -> str:
        if self.host == "registry.ollama.ai" and self.namespace == "library":
            return f"ollama:{self.model}:{self.tag}"
        if self.host == "registry.ollama.ai":
            return f"ollama:{self.namespace}/{self.model}:{self.tag}"
        return f"ollama:{self.host}/{self.namespace}/{self.model}:{self.tag}"


@dataclass(frozen=True, slots=True)
class LMStudioRef:
    publisher: str
    repo: str
    file: str | None = None
    tag: str | None = None

    def __str__(self) -> str:
        base = f"lmstudio:{self.publisher}/{self.repo}"
        return base + (f"/{self.file}" if self.file else "") + (f":{self.tag}" if self.tag else "")


SourceRef = HubRef | OllamaRef | LMStudioRef


def _split_tag(text: str) -> tuple[str, str | None]:
    if ":" not in text:
        return text, None
    body, tag = text.rsplit(":", 1)
    if not _TAG.match(tag):
        raise UsageError(f"'{tag}' is not a quant tag (in {text})", hint="write it as org/repo:Q4_K_M")
    return body, tag


def _valid_repo(repo: str) -> bool:
    return bool(_REPO.match(repo)) and "--" not in repo and ".." not in repo and not repo.endswith(".git")


def _hub_path(path: str, revision: str = "main") -> HubRef | None:
    """org/repo[:TAG] or org/repo/path/to/file.gguf."""
    path = path.strip("/")
    parts = path.split("/")
    if len(parts) < 2:
        return None
    if len(parts) == 2:
        body, tag = _split_tag(path)
        return HubRef(body, tag=tag, revision=revision) if _valid_repo(body) else None
    repo = "/".join(parts[:2])
    if not _valid_repo(repo) or not parts[-1]:
        return None
    return HubRef(repo, file="/".join(parts[2:]), revision=revision)


def _hub_url(url: str) -> HubRef | None:
    """https://huggingface.co/org/repo[/resolve|blob/REV/file] (or under HF_ENDPOINT)."""
    parts = urllib.parse.urlsplit(url)
    endpoint = urllib.parse.urlsplit(hub_endpoint())
    on_hub = parts.hostname in _HF_HOSTS or (parts.netloc == endpoint.netloc and parts.scheme == endpoint.scheme)
    if not on_hub:
        return None
    segs = [urllib.parse.unquote(s) for s in parts.path.strip("/").split("/") if s]
    if len(segs) >= 5 and segs[2] in ("resolve", "blob"):
        ref = _hub_path("/".join([*segs[:2], *segs[4:]]), revision=segs[3])
        return ref if ref is not None and ref.file else None
    if len(segs) == 2 or (len(segs) >= 4 and segs[2] == "tree"):
        return _hub_path("/".join(segs[:2]), revision=segs[3] if len(segs) >= 4 else "main")
    return None


def _ollama(text: str) -> OllamaRef:
    """Ollama's name rules (types/model/name.go): host/namespace/model:tag, defaults
    registry.ollama.ai / library / latest."""
    body, tag = _split_tag(text)
    parts = [p for p in body.split("/") if p]
    if not 1 <= len(parts) <= 3 or not all(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", p) for p in parts):
        raise UsageError(f"'ollama:{text}' is not an Ollama model name",
                         hint="write it as ollama:NAME[:TAG], e.g. ollama:llama3.2:1b (see `ollama list`)")
    host, namespace = "registry.ollama.ai", "library"
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return OllamaRef(host, namespace, parts[-1], tag or "latest")


def _lmstudio(text: str) -> LMStudioRef:
    body, tag = (text, None) if text.lower().endswith(".gguf") else _split_tag(text)
    parts = [p for p in body.split("/") if p]
    if len(parts) < 2:
        raise UsageError(f"'lmstudio:{text}' is not an LM Studio model name",
                         hint="write it as lmstudio:PUBLISHER/REPO[:QUANT] (see `homespec models`)")
    return LMStudioRef(parts[0], parts[1], "/".join(parts[2:]) or None, tag)


def parse(name: str) -> SourceRef | None:
    """The source a --model/--draft name points at, or None when it is not a source name.
    Call it only for names that are not existing paths: `org/repo` could also be a directory."""
    text = name.strip()
    low = text.lower()
    if low.startswith("ollama:"):
        return _ollama(text[len("ollama:"):])
    if low.startswith("lmstudio:"):
        return _lmstudio(text[len("lmstudio:"):])
    if low.startswith(("http://", "https://")):
        return _hub_url(text)
    for host in _HF_HOSTS:
        if low.startswith(host + "/"):
            return _hub_url("https://huggingface.co/" + text[len(host) + 1:]) if "/resolve/" in text or "/blob/" in text \
                else _hub_path(text[len(host) + 1:])
    if text.startswith((".", "~", "/", "\\")) or (os.altsep and os.altsep in text) or "\\" in text:
        return None
    parts = text.split("/")
    if len(parts) == 2 and parts[1].lower().endswith((".gguf", ".json", ".safetensors")):
        return None  # dir/file.gguf: a relative path, not a repo
    return _hub_path(text)
