"""Does this llama.cpp build decode? A smoke test run in a child process, so a crash is an answer.

Some builds load a model and then die in their first `llama_decode`: llama.cpp's AMX kernels on
virtualised Intel Xeons (Sapphire / Granite Rapids), where the weights are repacked into an `AMX`
buffer at load and the first matrix product segfaults (llama.cpp #20824, Ollama #17249 / #17006;
docs/backends.md, "AMX"). No Python code can survive that, so the test runs in a child: it loads the
embedded SmolLM2 model with homespec's own backend settings, decodes "The capital of France is"
(one batch of prompt tokens, then single tokens, both through llama_decode) and checks that the
greedy continuation names Paris. The parent reads the child's fate: passed, wrong tokens, or killed
by a signal.

    python -m homespec.backends.llamacpp.smoke [--variant NAME] [--record]

is what `scripts/setup.sh` runs after installing a wheel: exit 0 passed, 3 crashed (a signal) or
4 decoded wrong tokens with llama.cpp's extra buffer types (AMX / repack) but passed without them,
5 failed without them too (a build without AMX will not help), 1 could not run (no embedded model,
no llama_cpp), 6 decoded but lacks an entry point homespec calls (homespec.backends.llamacpp.exports:
the per-layer feature extraction, the draft head's, and the EAGLE-3.1 marker of homespec's patch,
kernels/llamacpp/eagle3.1.patch). `--record` stores the decode verdict for this library build
(homespec.backends.llamacpp.amx), so homespec does not test it again.

HOMESPEC_SMOKE_FAULT=SIGNAL[@WHEN] makes the child kill itself with SIGNAL just before its first
decode — how the tests make a crash real on any CPU. WHEN is a comma-separated list of conditions
that must all hold: `always` (the default), `extra-bufts` (the model was loaded with llama.cpp's
extra buffer types, the AMX / repack buffers: what the AMX failure depends on) or a variant name
(`--variant` names it). `SIGSEGV@extra-bufts,cpu` is an AMX crash of the `cpu` build.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from homespec.backends.llamacpp.amx import extra_bufts_allowed, record_installed
from homespec.backends.llamacpp.exports import missing_entry_points
from homespec.backends.llamacpp.smoke_check import (EXIT_ERROR, EXIT_LACKS, EXIT_PASS, EXIT_WRONG, EXPECT, N_DECODE,
                                                    PROMPT, check_build)
from homespec.embedded import smollm2_path
from homespec.errors import HomespecError


# --- the child ----------------------------------------------------------------------------------


def _fault_wanted(extra_bufts: bool) -> int | None:
    """The signal HOMESPEC_SMOKE_FAULT asks this child to die by, if it applies here."""
    spec = os.environ.get("HOMESPEC_SMOKE_FAULT", "")
    if not spec:
        return None
    name, _, when = spec.partition("@")
    variant = os.environ.get("HOMESPEC_SMOKE_VARIANT", "")
    holds = {"always": True, "extra-bufts": extra_bufts}
    applies = all(holds.get(w, w == variant) for w in (when or "always").split(","))
    return int(signal.Signals[name.upper()]) if applies else None


def child_main() -> int:
    """Load the embedded model as homespec does, decode greedily, print one JSON line."""
    try:
        # numpy and libllama in the child alone: main() only spawns it
        from homespec.backends.llamacpp.backend import LlamaCppBackend
        from homespec.backends.settings import BackendSettings

        path = smollm2_path()
        backend = LlamaCppBackend(path, BackendSettings(n_ctx=256, n_batch=64, n_ubatch=64))
    except HomespecError as e:
        print(json.dumps({"error": e.message}))
        return EXIT_ERROR
    fault = _fault_wanted(extra_bufts_allowed(backend._ll))
    if fault is not None:
        sys.stdout.flush()
        os.kill(os.getpid(), fault)
    tok = backend.tokenizer
    logits = backend.prefill(tok.encode(PROMPT, add_bos=True)).logits  # [1, V]: a batch of prompt rows
    out: list[int] = []
    for _ in range(N_DECODE):  # then single-token batches, as plain decoding runs
        nxt = int(logits[-1].argmax())
        out.append(nxt)
        logits = backend.prefill([nxt]).logits
    text = tok.decode(out)
    missing = missing_entry_points(backend._ll.llama_cpp._lib)
    backend.close()
    print(json.dumps({"text": text, "tokens": out, "missing": missing}))
    return EXIT_PASS if EXPECT in text else EXIT_WRONG


# --- the command --------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if "--child" in argv:
        return child_main()
    variant = argv[argv.index("--variant") + 1] if "--variant" in argv else ""
    result = check_build(variant=variant)
    if "--record" in argv and result.outcome in ("pass", "crash", "wrong"):
        record_installed(result)
    print(f"setup: {result.line()}", file=sys.stderr)
    if result.ok and result.missing:
        print(f"error: this llama.cpp build lacks {', '.join(result.missing)}, which homespec calls\n"
              "hint: `bash scripts/setup.sh` builds llama-cpp-python with kernels/llamacpp/eagle3.1.patch; "
              "a build of your own needs that patch too (docs/backends.md, \"The patch\")", file=sys.stderr)
        return EXIT_LACKS
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
