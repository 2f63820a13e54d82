"""Language models from Python against transformers' goldens (the fixtures' prompt ids,
greedy ids and the text up to the end-of-sequence token, written by
tools/fixtures/make_generate.py with transformers)."""
import json
import pathlib

import pytest

import luminal

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "generate"
MODELS = [("llama.gguf", "expected_llama_gguf.json"), ("qwen2.gguf", "expected_qwen2_gguf.json"),
          ("llama_folder", "expected_llama_folder.json")]


@pytest.mark.parametrize("model,golden", MODELS)
def test_ids_and_streamed_text_match_transformers(model, golden):
    m = luminal.load(FIXTURES / model)
    for case in json.loads((FIXTURES / golden).read_text()):
        ids = m.encode(case["prompt"])
        assert ids == case["prompt_ids"]
        steps = len(case["greedy_ids"])
        assert m.greedy_ids(ids, steps) == case["greedy_ids"]
        # The text stops at the end-of-sequence token, as the golden's does.
        pieces = list(m.generate(case["prompt"], steps))
        assert all(isinstance(p, str) for p in pieces)
        assert "".join(pieces) == case["text"]


def test_a_model_generates_again_after_an_early_stop_and_sampling_follows_the_seed():
    m = luminal.load(FIXTURES / "llama.gguf")
    first = next(iter(m.generate("The quick brown fox", 8, ignore_eos=True)))
    assert first
    once = "".join(m.generate("The quick brown fox", 8, temperature=0.8, seed=3, ignore_eos=True))
    again = "".join(luminal.generate(m, "The quick brown fox", 8, temperature=0.8, seed=3,
                                     ignore_eos=True))
    assert once == again


def test_bad_model_arguments_are_errors_naming_them(tmp_path):
    with pytest.raises(luminal.Error, match="nope.gguf"):
        luminal.load(tmp_path / "nope.gguf")
    with pytest.raises(luminal.Error, match="unknown device 'tpu'"):
        luminal.load(FIXTURES / "llama.gguf", device="tpu")
    with pytest.raises(luminal.Error, match="kv_cache"):
        luminal.load(FIXTURES / "llama.gguf", kv_cache="int4")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 12)
    with pytest.raises(luminal.Error):
        luminal.load(bad)
