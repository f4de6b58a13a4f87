"""Write the flags llama-server accepts, read from a llama.cpp source tree, to stdout.

    python scripts/llama_server_flags.py LLAMA_CPP_DIR [VERSION] > tests/data/llama_server_flags.txt

LLAMA_CPP_DIR is the llama.cpp that llama-cpp-python vendors, e.g. from its sdist:
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcp-sdist
    tar xzf /tmp/lcp-sdist/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcp-sdist
    python scripts/llama_server_flags.py /tmp/lcp-sdist/llama_cpp_python-0.3.36/vendor/llama.cpp 0.3.36

An option reaches llama-server when its `set_examples` names LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON (the
default) and its `set_excludes` does not name the server (common/arg.cpp, `add_opt` in
common_params_parser_init). tests/plan/test_plan_emit.py checks every flag `homespec plan --emit llama-server` prints
against the file this writes, so the test needs no llama.cpp checkout.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_STRINGS = re.compile(r'^\s*"[^"]*"(\s*,\s*"[^"]*")*\s*$')


def _names(group: str) -> list[str]:
    return re.findall(r'"([^"]*)"', group)


def _option(block: str, lists: dict[str, set[str]]) -> tuple[list[str], str, set[str], set[str], bool] | None:
    """(flags, value hint, examples, excludes, removed) of one `add_opt(common_arg(...))` block;
    `lists` holds the named example lists (`set_examples(mmproj_examples)`)."""
    block = re.sub(r"//[^\n]*", "", block)
    m = re.match(r"\s*\{([^}]*)\}\s*,\s*(?:\{([^}]*)\}\s*,\s*)?", block)
    if m is None or not _STRINGS.match(m.group(1)):
        return None
    flags = _names(m.group(1))
    if m.group(2) is not None and _STRINGS.match(m.group(2)):
        flags += _names(m.group(2))  # the negated forms: {"--foo"}, {"--no-foo"}
    rest = block[m.end():]
    hint = re.match(r'\s*("([^"]*)"|([\w:]+)\(\))', rest)
    value = (hint.group(2) if hint and hint.group(2) is not None else (hint.group(3) if hint else "")) or ""

    def enums(method: str) -> set[str]:
        found = re.search(r"\." + method + r"\((\{[^}]*\}|\w+)\)", block)
        if found is None:
            return set()
        arg = found.group(1)
        return lists[arg] if arg in lists else set(re.findall(r"LLAMA_EXAMPLE_\w+", arg))

    examples = enums("set_examples") or {"LLAMA_EXAMPLE_COMMON"}
    return flags, value, examples, enums("set_excludes"), "the argument has been removed" in block


def _spec_types(speculative_cpp: str) -> list[str]:
    table = re.search(r"common_speculative_type_from_name_map\s*=\s*\{(.*?)\};", speculative_cpp, re.S)
    return re.findall(r'\{"([\w-]+)",\s*COMMON_SPECULATIVE_TYPE_\w+\}', table.group(1)) if table else []


def _kv_types(arg_cpp: str) -> list[str]:
    table = re.search(r"kv_cache_types\s*=\s*\{(.*?)\};", arg_cpp, re.S)
    return [t.lower() for t in re.findall(r"GGML_TYPE_(\w+)", table.group(1))] if table else []


def server_flags(root: Path) -> tuple[list[str], list[str]]:
    """Lines for the accepted flags (with their fixed values, where the parser has a fixed set) and the
    flags the server still parses only to reject them as removed."""
    arg_cpp = (root / "common" / "arg.cpp").read_text()
    values = {"--spec-type": _spec_types((root / "common" / "speculative.cpp").read_text())}
    for flag in ("-ctk", "--cache-type-k", "-ctv", "--cache-type-v"):
        values[flag] = _kv_types(arg_cpp)
    lists = {name: set(re.findall(r"LLAMA_EXAMPLE_\w+", body)) for name, body in
             re.findall(r"initializer_list<enum llama_example>\s+(\w+)\s*=\s*\{([^}]*)\}", arg_cpp)}
    accepted: list[str] = []
    removed: list[str] = []
    parser = arg_cpp.split("common_params_context common_params_parser_init(")[-1]
    parser = parser.split("void common_params_add_preset_options(")[0]  # preset-file keys, not flags
    for block in parser.split("add_opt(common_arg(")[1:]:
        opt = _option(block.split("add_opt(")[0], lists)
        if opt is None:
            continue
        flags, hint, examples, excludes, gone = opt
        if not ({"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"} & examples) or "LLAMA_EXAMPLE_SERVER" in excludes:
            continue
        choice = re.fullmatch(r"\[(\w+(?:\|\w+)+)\]", hint)
        for flag in flags:
            if gone:
                removed.append(flag)
                continue
            vals = values.get(flag) or (choice.group(1).split("|") if choice else [])
            line = " ".join([flag, *vals])
            if line not in accepted:
                accepted.append(line)
    return accepted, removed


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[1])
    accepted, removed = server_flags(root)
    version = argv[2] if len(argv) == 3 else "?"
    print(f"# Flags llama-server accepts: llama.cpp vendored in llama-cpp-python {version}")
    print("# (vendor/llama.cpp/common/arg.cpp; --spec-type values from common/speculative.cpp).")
    print(f"# Made by: python scripts/llama_server_flags.py <llama.cpp dir> {version}")
    print("# One flag a line, then its values where the parser takes only a fixed set;")
    print("# '!' marks a flag the server parses only to reject it as removed.")
    for line in accepted:
        print(line)
    for flag in removed:
        print("!" + flag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
