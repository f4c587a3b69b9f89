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
