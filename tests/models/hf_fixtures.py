"""Tiny HF checkpoints built in the test session (nothing is downloaded)."""
import torch
import transformers

BASE = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)

CONFIGS = {
    "llama3": (transformers.LlamaConfig, dict(
        BASE, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 16},
        tie_word_embeddings=False)),
    "qwen2": (transformers.Qwen2Config, dict(BASE, tie_word_embeddings=True, rope_theta=10000.0)),
    "qwen3": (transformers.Qwen3Config, dict(BASE, head_dim=16, tie_word_embeddings=False)),
    "llama_linear": (transformers.LlamaConfig, dict(
        BASE, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})),
    "llama_dynamic": (transformers.LlamaConfig, dict(
        BASE, max_position_embeddings=8,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})),
    "qwen2_yarn": (transformers.Qwen2Config, dict(
        BASE, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                               "original_max_position_embeddings": 16})),
}
MODEL_CLASSES = {transformers.LlamaConfig: transformers.LlamaForCausalLM,
                 transformers.Qwen2Config: transformers.Qwen2ForCausalLM,
                 transformers.Qwen3Config: transformers.Qwen3ForCausalLM}


def build_hf_model(name: str, seed: int = 0):
    """A float32 HF model with weights scaled up from the default init so logits are far from zero."""
    cls, kwargs = CONFIGS[name]
    torch.manual_seed(seed)
    model = MODEL_CLASSES[cls](cls(**kwargs, attn_implementation="eager")).float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif pname.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    return model


def hf_logits(model, tokens, attention_mask=None, position_ids=None):
    rotary = model.model.rotary_emb
    if "dynamic" in str(rotary.rope_type):
        # HF's dynamic NTK keeps the largest length seen so far (stateful); rlpt uses the current batch's
        # length. Reset HF's cache so each call is computed from its own length.
        rotary.inv_freq = rotary.original_inv_freq
        rotary.max_seq_len_cached = rotary.original_max_seq_len
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens, dtype=torch.long),
                    attention_mask=None if attention_mask is None else torch.as_tensor(attention_mask),
                    position_ids=None if position_ids is None else torch.as_tensor(position_ids, dtype=torch.long))
    return out.logits.float().numpy()
