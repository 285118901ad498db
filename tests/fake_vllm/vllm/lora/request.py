"""Fake `vllm.lora.request.LoRARequest`: the real constructor's positional order, fields (per release) and id check."""

from __future__ import annotations



class LoRARequest:
    """LoRARequest(lora_name, lora_int_id, lora_path): vLLM keys adapters by the integer id (> 0)."""

    def __init__(self, lora_name: str, lora_int_id: int, lora_path: str = "", **kwargs):
        import vllm

        fields = vllm.API["lora_request_fields"]  # the release the fake stands for
        unknown = set(kwargs) - set(fields[3:])
        if unknown:
            raise TypeError(f"LoRARequest got unexpected keyword(s) {sorted(unknown)}")
        if isinstance(lora_int_id, bool) or not isinstance(lora_int_id, int) or lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {lora_int_id}")
        if not lora_path:
            raise ValueError("lora_path must be set")
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id
