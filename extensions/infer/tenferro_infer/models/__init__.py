"""Decoder models: a Llama-family decoder and a tiny GPT, both reading and writing a paged KV cache."""
