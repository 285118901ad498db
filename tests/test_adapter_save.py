"""Adapters are saved without asking the Hub anything (engine/hf.save_model): PEFT's default
save_embedding_layers="auto" looks up the base model's config.json on the Hub (at its default revision, not
the pinned one) whenever the base is a hub id; race saves with save_embedding_layers=False."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _tiny_lora(hub_id: str):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=64, max_position_embeddings=64)
    model = Qwen2ForCausalLM(cfg)
    model.name_or_path = model.config.name_or_path = hub_id  # as from_pretrained("Org/Name") leaves them
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def test_an_adapter_save_never_looks_up_the_hub(tmp_path, monkeypatch):
    import peft.utils.save_and_load as sl
    from safetensors.torch import load_file

    from race_cli.engine.hf import save_model

    asked: list[str] = []

    def hub(repo_id, filename, *args, **kwargs):
        asked.append(f"{repo_id}/{filename}")
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(sl, "check_file_exists_on_hf_hub", hub)
    model = _tiny_lora("Qwen/Qwen2.5-0.5B-Instruct")
    assert model.peft_config["default"].base_model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"
    with pytest.raises(AssertionError):  # PEFT's own default does ask (so this test can fail)
        model.save_pretrained(str(tmp_path / "default"))
    assert asked == ["Qwen/Qwen2.5-0.5B-Instruct/config.json"]
    save_model(model, str(tmp_path / "adapter"))
    assert asked == ["Qwen/Qwen2.5-0.5B-Instruct/config.json"]  # no second lookup
    keys = set(load_file(str(tmp_path / "adapter" / "adapter_model.safetensors")))
    assert keys and all("lora_" in k for k in keys)  # the LoRA weights only: no embedding copy
    assert len(keys) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)


def test_a_plain_model_saves_as_transformers_does(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from race_cli.engine.hf import save_model

    model = Qwen2ForCausalLM(Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64))
    save_model(model, str(tmp_path / "full"))  # full fine-tuning: no PEFT keyword passed to transformers
    assert (tmp_path / "full" / "config.json").is_file() and (tmp_path / "full" / "model.safetensors").is_file()
