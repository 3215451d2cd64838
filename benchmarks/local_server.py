"""A small random-weight Llama-style model served on this machine by `transformers serve`.

    from local_server import local_server
    with local_server() as (url, folder):
        ...  # an OpenAI-compatible server at `url`; `folder` holds config, weights, tokenizer

Everything is made here, with no download: a byte-level BPE tokenizer (the `tokenizers`
library) trained on made-up words and "hi", so any text encodes and "hi hi … hi" of N words
is N tokens (after the beginning-of-sequence token it puts first), wrapped as a
`PreTrainedTokenizerFast`; and a `LlamaForCausalLM` of random weights saved beside it. The
rows of the output projection of every token that is not a plain word (specials, bytes,
punctuation) are zero, so greedy decoding never picks one: every generated token is a word
of printable text, and no answer ends early at end-of-sequence.
The folder is cached under the system's temporary directory by its shape.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")


@dataclass(frozen=True)
class TinyLlama:
    """The served model's shape."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    intermediate: int = 768
    vocab: int = 8192
    context: int = 2048

    @property
    def name(self) -> str:
        return f"tiny-llama-h{self.hidden}-l{self.layers}-v{self.vocab}"


def _corpus(words: int, seed: int = 0) -> Iterator[str]:
    """Lines of made-up words from consonant-vowel syllables, with "hi" among them, that a
    byte-level BPE learns its merges from (any text still encodes: bytes are the fallback)."""
    import random

    rand = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    for _ in range(words // 16):
        line = ["".join(rand.choices(syllables, k=rand.randint(1, 3))) for _ in range(16)]
        yield " ".join(line + ["hi"] * 4)


def build_tokenizer(vocab: int):
    """A byte-level BPE fast tokenizer of at most `vocab` entries (specials first) in which
    " hi" is one token, that puts `<s>` in front of a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    core.train_from_iterator(_corpus(200_000), trainer)
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<pad>", model_max_length=4096,
    )  # fmt: skip


def _not_words(tokenizer) -> list[int]:
    """Ids of the tokens that are no plain lower-case word (specials, bytes, punctuation):
    the model never generates them, so every streamed token carries printable text."""
    plain = re.compile(r"^ ?[a-z]+$")
    return [i for i in range(len(tokenizer)) if not plain.match(tokenizer.decode([i]))]


def build_model_folder(shape: TinyLlama = TinyLlama(), root: Path | None = None) -> Path:
    """The folder of a random-weight Llama of `shape` with its tokenizer; made once."""
    folder = (root or Path(tempfile.gettempdir()) / "ceiling-bench-models") / shape.name
    if (folder / "config.json").exists() and (folder / "tokenizer.json").exists():
        return folder
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(shape.vocab)
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.heads,
        intermediate_size=shape.intermediate, vocab_size=len(tokenizer),
        max_position_embeddings=shape.context, bos_token_id=1, eos_token_id=2,
        pad_token_id=3, tie_word_embeddings=False, torch_dtype="float32",
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # greedy decoding never picks a zero row over the best of the rest
        model.lm_head.weight[_not_words(tokenizer)] = 0.0
    partial = folder.with_name(folder.name + f".part{os.getpid()}")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    with contextlib.suppress(OSError):  # another process may have made it meanwhile
        partial.rename(folder)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_command(folder: Path, port: int, batching: bool, extra: tuple[str, ...]) -> list[str]:
    exe = Path(sys.executable).with_name("transformers")
    cmd = [str(exe) if exe.exists() else "transformers", "serve", str(folder),
           "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--log-level", "warning"]  # fmt: skip
    return cmd + (["--continuous-batching"] if batching else []) + list(extra)


def wait_until_up(url: str, proc: subprocess.Popen, deadline_s: float) -> None:
    """Wait for `GET /v1/models` to answer 200; raise if the server exits or the deadline
    passes first."""
    import httpx

    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"transformers serve exited with code {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/models", timeout=2.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"transformers serve did not answer GET /v1/models in {deadline_s:g} s")


@contextlib.contextmanager
def local_server(
    shape: TinyLlama = TinyLlama(),
    continuous_batching: bool = False,
    deadline_s: float = 180.0,
    log: Path | None = None,
    extra_args: tuple[str, ...] = (),
    cores: set[int] | None = None,
) -> Iterator[tuple[str, Path]]:
    """(server URL, model folder) of a `transformers serve` of the tiny model on the CPU
    (`extra_args` added to its command line), stopped on leaving the block. The server's
    output goes to `log` (else discarded). `cores`: the CPUs the server may run on (its
    torch threads as many), so that clients on the others do not take its time."""
    folder = build_model_folder(shape)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sink = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    env, pin = None, None
    if cores:
        env = {**os.environ, "OMP_NUM_THREADS": str(len(cores))}

        def pin() -> None:
            os.sched_setaffinity(0, cores)

    proc = subprocess.Popen(_serve_command(folder, port, continuous_batching, extra_args),
                            stdout=sink, stderr=subprocess.STDOUT, env=env,
                            preexec_fn=pin)  # fmt: skip
    try:
        wait_until_up(url, proc, deadline_s)
        yield url, folder
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            sink.close()
