"""The devnet model: a tiny tokenizer and Llama built locally, warmed up, and cached."""
