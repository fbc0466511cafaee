"""Secrets never reach a bundle: environment names, credential-looking values, command lines."""

import pytest

from ddpdoctor.redact import (
    REDACTED,
    SecretMemory,
    join_argv,
    looks_like_secret,
    redact_argv,
    redact_env,
    redact_key_lines,
    redact_keys,
    redact_known_formats,
    redact_text,
    secret_name,
)


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "DB_PASSWORD",
        "MYSQL_PWD",
        "GITHUB_AUTH",
        "SSH_PRIVATE_KEY",
        "api-key",
        "hf-token",
        "COOKIE_JAR",
        "AZURE_CREDENTIALS",
        "OPENAI_APIKEY",
        "PASSWD",
    ],
)
def test_secret_names(name):
    assert secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PWD",
        "OLDPWD",
        "MASTER_ADDR",
        "NCCL_DEBUG",
        "NCCL_IB_PKEY",
        "KEYBOARD",
        "MONKEY",
        "SSH_AUTH_SOCK",
        "TORCHELASTIC_RUN_ID",
        "CUDA_VISIBLE_DEVICES",
        "HOME",
    ],
)
def test_not_secret_names(name):
    assert not secret_name(name)


@pytest.mark.parametrize(
    "value",
    [
        "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9v",
        "sk-" + "proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
        "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "AKIA" + "ABCDEFGHIJKLMNOP",
        "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA9",  # long, mixed case and digits, high entropy
    ],
)
def test_credential_values(value):
    assert looks_like_secret(value)
    assert value not in redact_text(f"x {value} y")


@pytest.mark.parametrize(
    "value",
    [
        "/home/user/checkpoints/resnet50_imagenet_epoch_90/model.pt",
        "0.1",
        "gloo",
        "0123456789abcdef0123456789abcdef01234567",  # a git SHA stays readable
        "localhost:29500",
        "train.py",
        "INFO",
        "my run name",
    ],
)
def test_harmless_values(value):
    assert not looks_like_secret(value)
    assert redact_text(value) == value


def test_env_redaction():
    env = {
        "HF_TOKEN": "abc",
        "PATH": "/usr/bin",
        "DATA_URL": "https://bob:s3cret@example.org/data",
        "NOTE": "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9v",
        "EMPTY_TOKEN": "",
    }
    out = redact_env(env)
    assert out["HF_TOKEN"] == REDACTED and out["PATH"] == "/usr/bin" and out["EMPTY_TOKEN"] == ""
    assert out["DATA_URL"] == f"https://bob:{REDACTED}@example.org/data"
    assert "aB3dE5" not in out["NOTE"]


def test_argv_redaction():
    argv = [
        "torchrun",
        "--nproc_per_node=2",
        "train.py",
        "--hf-token",
        "abc",
        "--api-key=xyz",
        "--password",
        "p w",
        "--lr",
        "0.1",
        "--data",
        "s3://u:pw@bucket/x",
        "https://h/x?token=abc&b=1",
        "--name",
        "my run",
        "WANDB_API_KEY=zzz",
        "--",
        "--secret-file",
        "f",
    ]
    out = redact_argv(argv)
    assert out[:4] == ["torchrun", "--nproc_per_node=2", "train.py", "--hf-token"]
    assert out[4] == REDACTED and out[5] == f"--api-key={REDACTED}" and out[7] == REDACTED
    assert out[8:10] == ["--lr", "0.1"] and out[13] == "--name" and out[14] == "my run"
    assert out[11] == f"s3://u:{REDACTED}@bucket/x" and out[12] == f"https://h/x?token={REDACTED}&b=1"
    assert out[15] == f"WANDB_API_KEY={REDACTED}" and out[16] == "--"
    assert len(out) == len(argv)
    assert "abc" not in join_argv(argv) and "'my run'" in join_argv(argv)


_BODY = [
    "pU3KGCUwux1tEyze1iN7LtkeP3IfyxlxF0SU1kk8nVw0YL4xIB5p/tqg7ui5mX9c",
    "fCmZ/a/lkyU81lSvTfrXFCegrrP+6SMvivIhH57kkcWxC+y1Vjv8Hm+TQn7LyP4p",
    "R95jbA6AbJV7poTWQx+16tdCTQk=",
]


def test_key_lines_beside_a_marker_in_another_text():
    """BEGIN in one file, the body and END in another (stdout/stderr): each text alone still hides the body,
    keeps the log prefixes and the number of lines."""
    head = "loading\n[rank0]: -----BEGIN PRIVATE KEY-----\n[rank0]: Ab12\n[rank0]: Cd34\n"
    tail = "[rank0]: Zz99Yy\n[rank0]: Short1\n[rank0]: -----END PRIVATE KEY-----\ndone\n"
    for text in (head, tail):
        out = redact_key_lines(text)
        assert out.count("\n") == text.count("\n") and out.count(f"[rank0]: {REDACTED}") == 2
        for tok in ("Ab12", "Cd34", "Zz99Yy", "Short1"):
            assert tok not in out
    assert "loading" in redact_key_lines(head) and "done" in redact_key_lines(tail)


def test_key_lines_on_their_own_and_what_stays():
    text = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\nEpoch\n" + "\n".join(_BODY) + "\nEpoch\n"
    out = redact_key_lines(text)
    assert not any(b in out for b in _BODY)  # the short last line goes with the body
    assert out.startswith("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\nEpoch\n")  # a hex digest
    assert out.endswith("\nEpoch\n")
    assert redact_text(_BODY[1]) == REDACTED  # slashes do not make it a path


def test_token_after_an_underscore_in_a_file_name():
    name = "runs/rank1_sk-proj-FileNameSecretAbCdEfGhIj0123.pt.trace.json"
    assert "FileNameSecret" not in redact_known_formats(name) and redact_known_formats(name).endswith(".pt.trace.json")
    assert redact_known_formats("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def test_a_printed_secret_is_hidden_where_echoed():
    known = SecretMemory()
    known.collect_log("[rank1]: Namespace(wandb_key='echoedKey4455aa', lr=0.1)\n[rank1]: step 3\n")
    assert "echoedKey4455aa" not in redact_text("connecting with echoedKey4455aa", known)
    assert "echoedKey4455aa" in redact_text("connecting with echoedKey4455aa", SecretMemory())  # that memory only


def _der_key(header_hex: str, n_bytes: int) -> str:
    """The base64 of a DER body (its real header, then deterministic bytes): what a key file holds."""
    import base64
    import hashlib

    body = b"".join(hashlib.sha256(bytes([i % 256, i // 256])).digest() for i in range(n_bytes // 32 + 1))
    return base64.b64encode(bytes.fromhex(header_hex) + body[:n_bytes]).decode()


# (name, base64 of a private key as its DER header starts it): RSA PKCS#8 (2048 bits), RSA PKCS#1, EC PKCS#8
# (P-256), EC SEC1, Ed25519 PKCS#8, an OpenSSH key body
DER_KEYS = [
    ("rsa pkcs8", _der_key("308204bd020100300d06092a864886f70d0101010500048204a7", 1190)),
    ("rsa pkcs1", _der_key("308204a40201000282010100", 1180)),
    ("ec pkcs8", _der_key("308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420", 105)),
    ("ec sec1", _der_key("30770201010420", 112)),
    ("ed25519", _der_key("302e020100300506032b657004220420", 32)),
    ("openssh", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQAAACD3kq"),
]


@pytest.mark.parametrize("name,key", DER_KEYS, ids=[k[0] for k in DER_KEYS])
def test_der_key_body_inside_a_line_without_markers(name, key):
    """Issue 41: a key's base64 body inside an error line, no BEGIN/END anywhere, is hidden by every redactor."""
    line = f"[rank0]: RuntimeError: cannot load signing key {key} (from $DEPLOY_KEY)"
    for redact in (redact_text, redact_known_formats, redact_keys):
        out = redact(line)
        assert key[:24] not in out and key[-24:] not in out, (redact.__name__, out)
        assert out == f"[rank0]: RuntimeError: cannot load signing key {REDACTED} (from $DEPLOY_KEY)"
    assert looks_like_secret(key)


def test_der_key_printed_as_a_repr_or_across_prefixed_lines():
    key = DER_KEYS[0][1]
    pem_lines = [key[i : i + 64] for i in range(0, len(key), 64)]
    as_repr = "ValueError: " + repr("\n".join(pem_lines)) + " is not a key"
    out = redact_text(as_repr)
    assert not any(p in out for p in pem_lines) and out.endswith(" is not a key")
    logged = "start\n" + "\n".join(f"[rank1]: {p}" for p in pem_lines) + "\n[rank1]: RuntimeError: bad key\nEpoch 1\n"
    out = redact_keys(logged)
    assert not any(p in out for p in pem_lines)
    assert out.count("\n") == logged.count("\n") and out.count(f"[rank1]: {REDACTED}") == len(pem_lines)
    assert out.endswith("[rank1]: RuntimeError: bad key\nEpoch 1\n")


@pytest.mark.parametrize(
    "text",
    [
        "MIIB is short",  # a prefix alone
        "MIIaGoodNameForAVariable",  # shorter than any key
        "tensor MHz 2400 MIG profile 1g.10gb",  # words
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL MII",
        "sha256 " + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ],
)
def test_der_prefix_in_ordinary_text_stays(text):
    assert redact_known_formats(text) == text and redact_keys(text) == text
