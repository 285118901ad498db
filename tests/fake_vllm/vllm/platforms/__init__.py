"""Fake `vllm.platforms`: the platform the engine runs on (see tests/fake_vllm/vllm/__init__.py).

FAKE_VLLM_PLATFORM=cpu stands for vLLM's CPU build (no sleep mode); anything else for a CUDA box.
"""

from __future__ import annotations

import os


class _Platform:
    @property
    def device_type(self) -> str:
        return "cpu" if os.environ.get("FAKE_VLLM_PLATFORM") == "cpu" else "cuda"

    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    def is_sleep_mode_available(self) -> bool:  # vllm/platforms/interface.py: CUDA, ROCm and XPU only
        return not self.is_cpu()


current_platform = _Platform()
