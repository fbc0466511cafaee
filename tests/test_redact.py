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
