"""A small Llama for the sharded harness's tests: 2 layers, hidden 128, vocab 4096 (tied), so
a step takes seconds."""

TINY = {
    "name": "tiny-llama",
    "architecture": "llama",
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 256,
    "vocab_size": 4096,
    "tie_word_embeddings": True,
    "max_position_embeddings": 512,
}
