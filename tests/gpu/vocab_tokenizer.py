"""A tokenizer that knows every id a Qwen3 model can emit, for benchmarks with dummy weights (no hub here).

Why: with `--load-format dummy` the model's logits are noise, so it emits ids from its whole embedding table
(151,936 rows for Qwen3). The lab's small tokenizer knows 465 of them. vLLM's incremental detokenizer
(vllm/v1/engine/detokenizer.py, FastIncrementalDetokenizer over tokenizers' DecodeStream) emits text only once the
window it holds decodes to more characters, so with unknown ids the window grows with every token and every step
re-decodes it: a per-token cost that grows with the output and is not the model's. The benchmark's random prompts
are also drawn from `tokenizer.vocab_size` ids (vllm/benchmarks/datasets.py, RandomDataset): with 465 ids half the
prompt tokens of a 512-token run came from the prefix cache, which no real workload of distinct prompts gets.

What: a byte-level BPE with Qwen3's shape - 151,643 ordinary tokens (ids 0-255 the byte alphabet, then words of
one to four ASCII letters with a leading space, each reachable by merges, so decode -> encode gives the same ids),
Qwen3's 26 added tokens at their ids (151,643-151,668, specials as Qwen3's tokenizer_config.json marks them) and
the embedding rows beyond them (151,669-151,935) as special padding tokens, so every id decodes to a short, valid
string and the detokenizer's window stays one token wide. Deterministic; stdlib only.

    python3 tests/gpu/vocab_tokenizer.py OUT_DIR
"""

from __future__ import annotations

import itertools
import json
import pathlib
import string
import sys

ROWS = 151936          # Qwen3's vocab_size (the embedding table the dummy weights sample from)
ORDINARY = 151643      # Qwen3's ordinary vocabulary (its tokenizer's vocab_size)
# Qwen3's added tokens from 151,643 on, and whether its tokenizer_config.json marks each special
ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
         ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
         ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
         ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
         ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
         ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
         ("<think>", False), ("</think>", False)]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def byte_alphabet() -> list:
    """GPT-2's bytes-to-unicode table in byte order (what the ByteLevel pre-tokenizer and decoder use)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def vocabulary() -> tuple:
    """(vocab {token: id}, merges [[left, right]]): the byte alphabet, then 'Ġ' + 1..4 letters, shortest first."""
    alphabet = byte_alphabet()
    space = alphabet[ord(" ")]
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = []
    letters = string.ascii_letters
    for length in range(1, 5):
        for word in itertools.product(letters, repeat=length):
            if len(vocab) == ORDINARY:
                return vocab, merges
            token = space + "".join(word)
            vocab[token] = len(vocab)
            merges.append([token[:-1], token[-1]])
    raise AssertionError("four-letter words cover the ordinary vocabulary")


def tokenizer_json() -> dict:
    vocab, merges = vocabulary()
    added = list(ADDED)
    added += [(f"<|extra_{row}|>", True) for row in range(ORDINARY + len(ADDED), ROWS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": ORDINARY + i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": special} for i, (content, special) in enumerate(added)],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": merges},
    }


def write(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_json()
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    config = {"added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in tok["added_tokens"]},
              "additional_special_tokens": [c for c, s in ADDED if s and c not in ("<|endoftext|>",)],
              "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
              "model_max_length": 262144, "clean_up_tokenization_spaces": False, "split_special_tokens": False,
              "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write(pathlib.Path(sys.argv[1]))
