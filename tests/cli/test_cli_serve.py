"""`homespec serve`'s flags and start-up rules, without a model: bad flags are one-line usage
errors (exit 2) before anything binds or loads; the exposure warning; the key check."""

from __future__ import annotations

import pytest

from homespec.cli import main
from homespec.server.guard import key_matches
from homespec.server.run import bind, exposure_warning, is_loopback, url_of


@pytest.mark.parametrize("args, words", [
    (["--parallel", "0"], "--parallel 0"),
    (["--queue", "0"], "--queue 0"),
    (["--port", "70000"], "--port 70000"),
    (["--api-key", " "], "--api-key is empty"),
    (["--max-body-mib", "0"], "--max-body-mib 0"),
    (["--cache-ram", "-1"], "--cache-ram"),
    (["--method", "magic"], "unknown method"),
    (["--ctx", "8"], "--ctx 8"),
    (["--cors", "chat.example.org"], "is not an origin"),
    (["--cors", "https://chat.example.org/app"], "is not an origin"),
    (["--cors", ","], "--cors is empty"),
    (["--reasoning-format", "verbose"], "--reasoning-format 'verbose'"),
    (["--max-tokens", "0"], "--max-tokens 0"),
    (["-n", "1e3"], "--max-tokens '1e3'"),
    (["--store-responses", "-1"], "--store-responses"),
    (["--store-mib", "0"], "--store-mib 0"),
    (["--temp", "3"], "--temperature 3"),
    (["--top-k", "-1"], "--top-k -1"),
    (["--top-p", "0"], "--top-p 0"),
    # the torch backend's engine decodes one sequence at a time: refused before the weights load
    (["--port", "0", "--backend", "torch", "--method", "none", "--parallel", "2"], "--parallel 2"),
])
def test_bad_flags_are_one_line_usage_errors(capsys, args, words):
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    error = [line for line in err if line.startswith("error: ")]
    assert len(error) == 1 and words in error[0] and err[-1].startswith("hint: ")


def test_a_chat_template_file_that_does_not_render_is_a_usage_error(capsys, tmp_path):
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    assert main(["serve", "--port", "0", "--chat-template-file", str(broken)]) == 2
    assert "--chat-template-file" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--chat-template-file", str(tmp_path / "missing.jinja")]) == 2


def test_serve_lists_its_flags(capsys):
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--host", "--port", "--api-key", "--alias", "--parallel", "--queue", "--max-body-mib", "--ctx",
                 "--method", "--draft", "--backend", "--threads", "--cors", "HOMESPEC_API_KEY", "--chat-template-file",
                 "--reasoning-format", "--max-tokens", "--store-responses", "--store-mib", "--temperature", "--temp",
                 "--top-k", "--top-p"):
        assert flag in out, flag


def test_cors_origins_are_read_as_a_browser_sends_them():
    from homespec.cli.serve import cors_origins

    assert cors_origins(None) == ()
    assert cors_origins("https://a.example.org/, http://b.example:3000") == ("https://a.example.org",
                                                                              "http://b.example:3000")
    assert cors_origins("*") == ("*",)


def test_only_a_server_open_beyond_loopback_without_a_key_warns():
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("::1", None) is None
    assert exposure_warning("localhost", None) is None and exposure_warning("0.0.0.0", "k") is None
    warning = exposure_warning("0.0.0.0", None)
    assert warning.startswith("warning: ") and "--api-key" in warning
    assert is_loopback("127.0.0.2") and not is_loopback("192.168.1.4")


def test_the_key_is_a_bearer_token_or_an_x_api_key_compared_whole():
    assert key_matches(b"Bearer s3cret", "s3cret") and key_matches(b"bearer s3cret", "s3cret")
    assert key_matches(None, "s3cret", b"s3cret") and key_matches(b"Basic x", "s3cret", b"s3cret")
    for header in (None, b"", b"s3cret", b"Bearer s3cre", b"Bearer s3cret2", b"Basic s3cret"):
        assert not key_matches(header, "s3cret"), header
        assert not key_matches(header, "s3cret", b"s3cre"), header
    assert not key_matches(b"Bearer wrong", "s3cret", b"s3cret")  # a wrong bearer is not rescued


def test_a_port_in_use_is_a_runtime_error_naming_another_port():
    from homespec.errors import HomespecError

    first = bind("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        assert url_of(first) == f"http://127.0.0.1:{port}/v1"
        with pytest.raises(HomespecError, match="in use") as e:
            bind("127.0.0.1", port)
        assert e.value.exit_code == 1 and f"--port {port + 1}" in e.value.hint
    finally:
        first.close()
