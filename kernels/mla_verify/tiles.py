"""Tile configurations of the MLA verify kernel, mirrored from csrc/mla_verify_kernel.cuh.

A config is (BM query rows per CTA, BN KV tokens per tile, STAGES cp.async stages) and its
tensor-core engine: "mma" (mma.sync + ldmatrix, the generic template, sm_90a and sm_120a) or
"wgmma" (warpgroup MMA from swizzled smem, sm_90a only). Shared memory (bytes, all dynamic):
mma = Q tile BM*1152 + STAGES*BN*1152 (KV) + BM*BN*2 (P, bf16) + 24*BM (fp32 row max and row
sum per half, alpha and max per row); wgmma = the same Q/KV/P tiles + 16*BM (row max and sum
per warpgroup) + 1024 (slack to align the base to the 1024-byte swizzle period).
verify_tools.build_check parses BM/BN/STAGES from the mangled kernel names and uses `smem_bytes`
for the ptxas report; the GPU tests check it against the binding's own number.
"""

from __future__ import annotations

from dataclasses import dataclass

ROW_BYTES = 576 * 2  # one token / query row: 576 bf16


@dataclass(frozen=True)
class TileConfig:
    name: str
    index: int  # the `cfg` integer of the C++ launcher
    block_m: int
    block_n: int
    stages: int
    engine: str = "mma"
    # fp8 cache: the F16 kernel instance (prefix tiles as f16 MMAs, one conversion per two fp8 values) runs where a
    # split's prefix chunk holds at least this many tokens (api.fp8_f16); 0 = the config has no F16 instance.
    fp8_f16_min_tokens: int = 0
    # fp8 cache, f16 arithmetic: the warp-specialized fp8 kernel (csrc/mla_verify_wgmma_ws_fp8.cuh, the F16 kernel's
    # arithmetic) runs where a split's prefix chunk holds at least this many tokens (api.fp8_f16); 0 = none.
    fp8_ws_min_tokens: int = 0

    @property
    def threads(self) -> int:
        return (self.block_m // 16) * 2 * 32

    @property
    def smem_bytes(self) -> int:
        if self.engine == "wgmma":
            return (
                (self.block_m + self.stages * self.block_n) * ROW_BYTES
                + self.block_m * self.block_n * 2
                + 16 * self.block_m
                + 1024
            )
        return smem_bytes(self.block_m, self.block_n, self.stages)

    @property
    def ctas_per_sm_hint(self) -> int:
        """CTAs of this config that fit one SM by smem (228 KiB/SM on sm_90, 100 KiB on sm_120)."""
        return 1 if self.smem_bytes > 114 * 1024 else 2


def smem_bytes(block_m: int, block_n: int, stages: int) -> int:
    """Dynamic shared memory (bytes) requested by the launcher for one CTA."""
    return block_m * ROW_BYTES + stages * block_n * ROW_BYTES + block_m * block_n * 2 + 24 * block_m


# fp8_f16_min_tokens: sm90wg from session 18 (H200, n=8 H=16, f16 / bf16 time: 1.236 at 64 tokens per split, 1.093
# at 128, 0.979 at 256, 0.960 at 512). The mma.sync configs have none: sm120's F16 instance measured 1.10-1.17x
# slower on the H200 (session 18 call 4), sm90's spilled 248 bytes.
SM90 = TileConfig("sm90", 0, 64, 64, 2)
SM120 = TileConfig("sm120", 1, 32, 16, 3)
# fp8_ws_min_tokens: sm90wg, the warp-specialized fp8 kernel with its ASYM consumers over the F16 kernel (H100, fp8
# cache, f16 arithmetic, one process each): 0.928 at 2,048 tokens per split (B=1 L=128k n=8 H=16), 0.990 and 1.020 at
# 1,024 (B=4 L=32k n=4, B=8 L=8k n=8), 1.103 at 512 (B=1 L=32k) (session 44 call 3); at 4,032-8,192 the MODE 0 build
# ran 0.918-0.933 of the F16 kernel (call 1) and ASYM 0.931-0.960 of MODE 0 (call 2).
SM90WG = TileConfig("sm90wg", 2, 64, 64, 2, engine="wgmma", fp8_f16_min_tokens=256, fp8_ws_min_tokens=2048)
# sm90wg's warp-specialized bf16 kernel (csrc/mla_verify_wgmma_ws.cuh, WS_SMEM_BYTES): the same layout plus its four
# 8-byte mbarriers.
SM90WG_WS_SMEM_BYTES = SM90WG.smem_bytes + 4 * 8
# sm90wg's warp-specialized fp8 kernel (csrc/mla_verify_wgmma_ws_fp8.cuh, WS_FP8_SMEM_BYTES): the layout plus 128 B
# of mbarriers and the final row maxima (block_m fp32), since session 47 (its P atom holds raw fp8 bytes).
SM90WG_WS_FP8_SMEM_BYTES = SM90WG.smem_bytes + 128 + SM90WG.block_m * 4
CONFIGS = {c.name: c for c in (SM90WG, SM90, SM120)}

# Per-block shared-memory limits (bytes): 227 KiB on sm_90, 99 KiB on sm_120.
SMEM_LIMIT = {"sm_90a": 227 * 1024, "sm_120a": 99 * 1024}
# Shared memory per SM (bytes) usable by CTAs, and the 1 KiB the runtime reserves per CTA.
SM_SMEM = {"sm_90a": 228 * 1024, "sm_120a": 100 * 1024}
CTA_RESERVED_SMEM = 1024


def ctas_per_sm(cfg: TileConfig, arch: str) -> int:
    """CTAs of `cfg` resident per SM on `arch`, as limited by shared memory (>= 1)."""
    return max(1, SM_SMEM[arch] // (cfg.smem_bytes + CTA_RESERVED_SMEM))


# Tile configs compiled into (and used on) each arch. sm_90a also carries the sm120 config so
# that the Blackwell code path can be proven on Hopper hardware, and the mma.sync sm90 config
# (the measured baseline of the wgmma one).
ARCH_CONFIGS = {"sm_90a": (SM90WG, SM90, SM120), "sm_120a": (SM120,)}
DEFAULT_CONFIG = {"sm_90a": SM90WG, "sm_120a": SM120}
