"""One redaction for everything the advisor stores, exports or prints."""

from __future__ import annotations

import pytest

from advisor.core.redact import REDACTED, is_secret_name, redact_argv, redact_obj, redact_text, redact_url

SECRET = "sk-abcdefghijklmnopqrstuvwxyz012345"


@pytest.mark.parametrize(
    "name",
    ["--api-key", "api_key", "--hf-token", "HF_TOKEN", "OPENAI_API_KEY", "db_password", "client_secret"],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--max-num-batched-tokens", "tokenizer", "--kv-cache-memory-bytes", "--ssl-keyfile", "max_tokens"],
)
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_argv() -> None:
    argv = [
        "vllm",
        "serve",
        "m",
        "--api-key",
        "k1",
        "k2",
        "--hf-token=t",
        "--max-num-seqs",
        "8",
        "HF_TOKEN=x",
        f"--served-model-name={SECRET}",
        "--url",
        "http://u:pw@host/",
    ]
    out = redact_argv(argv)
    assert out[:6] == ["vllm", "serve", "m", "--api-key", REDACTED, REDACTED]
    assert "--hf-token=" + REDACTED in out and "HF_TOKEN=" + REDACTED in out
    assert out[out.index("--max-num-seqs") + 1] == "8"
    joined = " ".join(out)
    for s in ("k1", "k2", SECRET, ":pw@"):
        assert s not in joined
    assert redact_argv(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "non-default args: {'api_key': 'SECRETX', 'max_num_seqs': 8}",
        "--api-key SECRETX --port 8000",
        "--api-key=SECRETX",
        "Authorization: Bearer SECRETX",
        "HF_TOKEN=SECRETX ./serve",
        "http://user:SECRETX@host:8000/metrics",
        '{"token": "SECRETX"}',
    ],
)
def test_text(text: str) -> None:
    out = redact_text(text)
    assert "SECRETX" not in out and REDACTED in out
    assert redact_text(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, Running: 3 reqs",
        "max_num_batched_tokens=8192, tokenizer='/models/x', bos_token_id=1",
        "GPU KV cache size: 49,152 tokens",
    ],
)
def test_clean_text_untouched(text: str) -> None:
    assert redact_text(text) == text


def test_obj_and_url() -> None:
    got = redact_obj({"api_key": "x", "nested": [{"hf_token": "y"}], "argv": ["--api-key", "z"], "n": 3})
    assert got == {
        "api_key": REDACTED,
        "nested": [{"hf_token": REDACTED}],
        "argv": ["--api-key", REDACTED],
        "n": 3,
    }
    assert redact_url("http://a:b@h:1/metrics?api_key=k&x=1") == f"http://h:1/metrics?api_key={REDACTED}&x=1"


@pytest.mark.parametrize(
    "text",
    [
        "error: api_key=SECRETX",
        "error: cannot connect: token: SECRETX",
        "GET http://h:8000/metrics?token=SECRETX failed",
        "url: http://h/metrics?x=1&access_token=SECRETX&y=2",
        "(https://h/v1?api_key=SECRETX#frag)",
        "fetch https://SECRETX@github.com/org/repo",
        "http://user:SECRETX@host:8000/",
        "Authorization: Basic SECRETX",
        "Proxy-Authorization: Digest username=u, response=SECRETX",
        "{'authorization': 'Token SECRETX', 'n': 1}",
        "Cookie: session=SECRETX; theme=dark",
        "Set-Cookie: sid=SECRETX; HttpOnly",
        "--api-ke SECRETX --port 8000",
        "--hf-tok=SECRETX",
        "--api_k SECRETX",
    ],
)
def test_secrets_in_free_text_urls_headers_and_abbreviations(text: str) -> None:
    out = redact_text(text)
    assert "SECRETX" not in out and REDACTED in out
    assert redact_text(out) == out


def test_a_url_without_secrets_keeps_its_user_and_query_names() -> None:
    out = redact_text("see http://h:8000/metrics?name=x and https://TOKEN@host/p")
    assert "http://h:8000/metrics?name=x" in out
    assert f"https://{REDACTED}@host/p" in out


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token"])
def test_every_abbreviation_argparse_accepts_is_redacted(flag: str) -> None:
    name = flag[2:]
    for n in range(2, len(name) + 1):
        for spelled in (name[:n], name[:n].replace("-", "_")):
            argv = ["vllm", "serve", "m", f"--{spelled}", "SECRETX", "--max-num-seqs", "8"]
            out = redact_argv(argv)
            assert "SECRETX" not in out, out
            assert out[-2:] == ["--max-num-seqs", "8"]
            assert "SECRETX" not in redact_argv([*argv[:3], f"--{spelled}=SECRETX"])
            assert "SECRETX" not in redact_text(" ".join(argv))


def test_an_abbreviated_api_key_takes_several_values() -> None:
    out = redact_argv(["vllm", "serve", "--api-ke", "k1", "k2", "--port", "1"])
    assert out == ["vllm", "serve", "--api-ke", REDACTED, REDACTED, "--port", "1"]
