"""Tile configurations of the DSA verify kernel, mirrored from csrc/dsa_verify_kernel.cuh (Cfg<>),
csrc/dsa_verify_n8.cuh (CfgN<>) and csrc/dsa_verify_wgmma.cuh (CfgW<>).

A config is (BM heads per CTA, BN index positions per KV tile, STAGES cp.async stages); all but w64
use mma.sync m16n8k16. Three kinds:
- "m" (heads in the mma M, Cfg<>: m16, m32, m64, m16d, m16w). Warps: 4 * (BM / 32) (at least 4),
  or the config's override (m16w: 8). Shared memory (bytes, all dynamic): Q BM*1152 + STAGES raw
  KV tiles (BN*1152 bf16, BN*656 fp8) + one bf16 compute tile BN*1152 (fp8 only) + P BM*BN*2 +
  (2*TG*BM + 2*BM)*4 (row max/sum per column group, alpha, max) + (STAGES+1)*BN*4 (per-position
  flags) + (fp8) 4*BM*4 Q block exponents + BN*16 scales + 16 (the tile's max scale per block),
  TG = warps / (BM/16) column groups of the S phase.
- "wg" (w64, sm_90a: csrc/dsa_verify_wgmma.cuh): 64 heads on warpgroup MMA (wgmma), 8 warps,
  BN 64, 2 stages, the dense wgmma kernel's schedule; fp8 rows become f16 tiles scaled per block
  by 1 / sigma_b in registers (no extra shared memory). Shared memory, both caches: 1024
  (alignment slack) + Q 64*1152 + 2 KV tiles 64*1152 + P 64*64*2 + 4*64*4 (row max/sum of both
  warpgroups) + 2*64*4 (per-position flags).
- "n8" (8 heads in the mma N, CfgN<WARPS, STAGES>: n8, n8s, n8w; n8r and n8rw add REG, fp8 only:
  no converted rows, Q16 8*1088 instead, no scale copies): every warp owns 16 positions of each
  tile (BN = 16 * WARPS) with its own STAGES-deep ring. Shared memory: Q 8*1152 +
  WARPS*STAGES*16 raw rows + (fp8) WARPS*16*1152 converted rows (f16 nope, bf16 rope) +
  WARPS*STAGES*4 mask words + (fp8) 8*4 fp32 Q block exponents + WARPS*16*4 fp32 scales.
  n8x (experimental, CfgX<WARPS, STAGES, FP8>) is n8 with the PV split by dims across the warps
  (pv_by_dims; bf16 only, or with reg fp8 only): n8's bytes rounded up to 16 + P^T 2*WARPS*8*24*4 +
  maxima 2*WARPS*8*4 + sums WARPS*8*4 + (fp8) the warps' tile maxima of |scale| 2*WARPS*4*4.
"""

from __future__ import annotations

from dataclasses import dataclass

BF_ROW = 1152
FP8_ROW = 656
QROW16 = 512 * 2 + 64  # CfgN REG: one f16 Q row (permuted nope dims), padded
# Per-block shared-memory limits (bytes): 227 KiB on sm_90, 99 KiB on sm_120.
SMEM_LIMIT = {"sm_90a": 227 * 1024, "sm_120a": 99 * 1024}


@dataclass(frozen=True)
class TileConfig:
    name: str
    index: int  # the `cfg` integer of the C++ launcher
    block_m: int
    block_n: int
    stages: int
    warps_override: int = 0  # the Cfg<> WARPS_ argument (0: 4 * PV row warps); CfgN: its WARPS
    kind: str = "m"  # "m": heads in the mma M (Cfg<>); "n8": 8 heads in the mma N (CfgN<>); "wg": wgmma (CfgW<>)
    reg: bool = False  # CfgN REG: fp8 only, e4m3 converted in registers (no f16 tile; Q16 rows)
    pv_by_dims: bool = False  # CfgX (n8x): warp w's PV over dims [512/WARPS * w, ...) of every warp's P

    @property
    def fp8_only(self) -> bool:
        """REG converts e4m3 in registers: the config has no bf16 kernel."""
        return self.reg

    @property
    def bf16_only(self) -> bool:
        """A split PV (n8x) without REG is built for bf16 rows only: the config has no fp8 kernel."""
        return self.pv_by_dims and not self.reg

    @property
    def kv_kinds(self) -> tuple[bool, ...]:
        """The fp8 flags the config is built for (False: bf16 cache, True: fp8 656-byte rows)."""
        return (True,) if self.fp8_only else (False,) if self.bf16_only else (False, True)

    @property
    def warps(self) -> int:
        if self.warps_override:
            return self.warps_override
        rb = 2 if self.block_m >= 32 else 1
        return 4 * (self.block_m // (16 * rb))

    @property
    def threads(self) -> int:
        return self.warps * 32

    def smem_bytes(self, fp8: bool) -> int:
        """Dynamic shared memory of the kernel (bytes); 0 where the config has no kernel for the
        cache kind (bf16 for an fp8-only config), as the binding's config_smem_bytes answers."""
        if fp8 not in self.kv_kinds:
            return 0
        bm, bn, st = self.block_m, self.block_n, self.stages
        if self.kind == "wg":
            return 1024 + (1 + st) * bn * BF_ROW + bm * bn * 2 + 4 * bm * 4 + st * bn * 4
        if self.kind == "n8":
            w = self.warps
            q16 = bm * QROW16 if self.reg else 0
            cvt = w * 16 * BF_ROW if fp8 and not self.reg else 0
            raw_row = FP8_ROW if fp8 else BF_ROW
            head = bm * BF_ROW + q16 + w * st * 16 * raw_row + cvt
            if not fp8:
                n8 = head + w * st * 4
            else:
                n8 = -(-(head + w * st * 4) // 16) * 16 + bm * 16 + (0 if self.reg else w * 16 * 16)
            if not self.pv_by_dims:
                return n8
            # CfgX: P^T [2][w][8][24] fp32, maxima [2][w][8], sums [w][8], (fp8) tile maxima [2][w][4]
            return -(-n8 // 16) * 16 + 2 * w * bm * 24 * 4 + 2 * w * bm * 4 + w * bm * 4 + (2 * w * 4 * 4 if fp8 else 0)
        tg = self.warps // (bm // 16)
        raw = bn * (FP8_ROW if fp8 else BF_ROW)
        return (
            bm * BF_ROW
            + st * raw
            + (bn * BF_ROW if fp8 else 0)
            + bm * bn * 2
            + (2 * tg * bm + 2 * bm) * 4
            + (st + 1) * bn * 4
            + (4 * bm * 4 + bn * 16 + 16 if fp8 else 0)
        )


M16 = TileConfig("m16", 0, 16, 32, 2)
M32 = TileConfig("m32", 1, 32, 16, 3)
M64 = TileConfig("m64", 2, 64, 32, 3)
# m16 with a 4-deep ring (sm_90a: 227 KiB): one CTA per SM, a 128-position split wholly in flight;
# the small-T latency config (used when the split grid fits one wave at one CTA per SM)
M16D = TileConfig("m16d", 3, 16, 32, 4)
# m16 with 8 warps on 64-position tiles (sm_90a): the B=1 latency config, one tile per split
M16W = TileConfig("m16w", 4, 16, 64, 2, 8)
# 8 heads per CTA in the mma N (H <= 8 wastes no tensor-core row: GLM-5 at TP8): 4 independent warps
# of 16 positions (sm_90a), and 2 (every arch, <= 99 KiB)
N8 = TileConfig("n8", 5, 8, 64, 2, 4, kind="n8")
N8S = TileConfig("n8s", 6, 8, 32, 2, 2, kind="n8")
# n8 with 7 warps and one raw stage per warp (sm_90a): with fp8 the stage is free once converted, so
# each warp still has its next tile in flight, and the SM holds 7 warps instead of 4
N8W = TileConfig("n8w", 7, 8, 112, 1, 7, kind="n8")
# n8r (sm_90a, fp8 only): 8 warps x 2 raw stages, e4m3 converted in registers into the mma fragments
N8R = TileConfig("n8r", 8, 8, 128, 2, 8, kind="n8", reg=True)
# n8rw (every arch, fp8 only): n8r's path with 7 warps x 1 raw stage (91,552 B): one CTA of 7 warps
# per 100 KB sm_120 SM, the most warps an in-register fp8 config holds there (sm_120a's fp8 config)
N8RW = TileConfig("n8rw", 12, 8, 112, 1, 7, kind="n8", reg=True)
# w64 (sm_90a, bf16 and fp8): 64 heads of one row on wgmma, the dense kernel's schedule (auto for H > 16)
W64 = TileConfig("w64", 13, 64, 64, 2, 8, kind="wg")
CONFIGS = {c.name: c for c in (M16, M32, M64, M16D, M16W, N8, N8S, N8W, N8R, N8RW, W64)}
# Built into each arch: sm_90a carries the sm_120a configs too, so the Blackwell code path is
# proven on Hopper hardware.
ARCH_CONFIGS = {
    "sm_90a": (M16, M32, M64, M16D, M16W, N8, N8S, N8W, N8R, N8RW, W64),
    "sm_120a": (M16, M32, N8S, N8RW),
}
# Experimental configs: only in the experimental JIT build (_build.load_experimental, csrc
# DSAV_EXPERIMENTAL), never in phase 0's build, the prebuilt library, auto or the parity suite's
# "all"; reachable by name (tile_config=, dsa_parity --configs, dsa_bench --alt-config).
# n8rs: n8r's in-register fp8 path with n8s's 2 warps (60,048 B: within sm_120a's 99 KiB per block,
# one CTA per 100 KB sm_120 SM, so 2 warps per SM there; slower than n8rw under the sm_120 occupancy
# emulation, session 8)
N8RS = TileConfig("n8rs", 11, 8, 32, 2, 2, kind="n8", reg=True)
# (w64cw, w64 with the wide combine, measured in session 12 and shipped as the combine kernel of every
# config for large T x H: api.combine_wide.)
# (w64l / w64p / w64q, w64's loads issued later or by a producer warpgroup, and w64d, its direct-store
# epilogue, were measured in session 13 and removed: docs/kernels/dsa-verify-notes.md.)
# (w64f, w64 with fp8's prologue loads overlapped, was measured no faster in session 14 and removed;
# w64o, fp8's S as one f16 chain, was measured 0.89-0.94x w64's fp8 time and became w64's fp8 kernel.)
# (w64r / w64r12, Q's A fragment of S's first 8 / 12 k-steps in registers, measured 1.009-1.035x w64's
# bf16 time in session 14 (w64r 0.997 at B=1 n=4) and removed.)
# (w64z, w64's fp8 kernel with a lazy sigma instead of the prepass over the split's scales, measured
# 0.97-1.00x w64's fp8 time in session 15 and became w64's fp8 kernel.)
# n8x (bf16 only): n8's S phase per warp, then every warp's P^T and running max through shared memory
# and one barrier per tile, and the PV split by dims (warp w: dims [128w, 128w + 128) of all 64
# positions): no 64 KB end merge of the warps' O^T. For splits of one or two tiles (B=1 latency regime);
# a ring stage is refilled one barrier later than in n8 (docs/kernels/dsa-verify-notes.md, session 50).
N8X = TileConfig("n8x", 14, 8, 64, 2, 4, kind="n8", pv_by_dims=True)
# n8x8: n8x with 8 warps (BN 128, 64 dims each in the PV) and one stage, freed by a second barrier per tile:
# at 16 splits one 128-position tile per split with all 8 warps' rows in flight at once
N8X8 = TileConfig("n8x8", 15, 8, 128, 1, 8, kind="n8", pv_by_dims=True)
# n8xr (fp8 only): n8x with n8r's in-register e4m3 path; warp w's 128 dims are scale block w, whose sigma
# the consumer keeps over every warp's rows. n8xrs: one stage (66,704 B), within an sm_120 SM's 99 KiB
N8XR = TileConfig("n8xr", 16, 8, 64, 2, 4, kind="n8", reg=True, pv_by_dims=True)
N8XRS = TileConfig("n8xrs", 17, 8, 64, 1, 4, kind="n8", reg=True, pv_by_dims=True)
EXPERIMENTAL_CONFIGS = {c.name: c for c in (N8RS, N8X, N8X8, N8XR, N8XRS)}
# sm_120 (RTX Blackwell) shared memory per SM and reserved per block (bytes; CUDA's table per compute
# capability; registers per SM are as on sm_90): the one source of the numbers the sm_120 occupancy
# emulation (api.emulate_sm120_occupancy -> the experimental build's set_sm120_occupancy) pads to.
SM120_SMEM_PER_SM = 100 * 1024
SM120_RESERVED_PER_BLOCK = 1024


def has_kernel(name: str, fp8: bool) -> bool:
    """Whether config `name` (shipped or experimental, a "/cluster" suffix ignored) has a kernel for the cache kind:
    fp8-only configs (n8r, n8xr) have no bf16 kernel, bf16-only ones (n8x) no fp8 kernel. "auto" and unknown names
    answer True (their checks are the caller's)."""
    cfg = CONFIGS.get(name.partition("/")[0]) or EXPERIMENTAL_CONFIGS.get(name)
    return cfg is None or fp8 in cfg.kv_kinds


def sm120_ctas_per_sm(cfg: TileConfig, fp8: bool) -> int:
    """CTAs of `cfg` one sm_120 SM holds by shared memory (0: no kernel for the cache kind)."""
    b = cfg.smem_bytes(fp8)
    return SM120_SMEM_PER_SM // (b + SM120_RESERVED_PER_BLOCK) if b else 0


# Configs that can run their splits as one thread-block cluster with the combine fused in DSMEM
# (the fp32 partial [16][516] must fit the drained KV ring); cluster sizes 2..16, powers of two.
CLUSTER_CONFIGS = ("m16", "m16d", "m16w")
MAX_CLUSTER = 16


def default_config(arch: str, heads: int) -> TileConfig:
    """m16 for H <= 16 (GLM-5 at TP8: H = 8), else the largest mma.sync head tile the arch holds;
    api.resolve_full refines it (the n8 configs for H <= 8, w64 for H > 16 on sm_90a, either cache)."""
    if heads <= 16:
        return M16
    return M64 if arch == "sm_90a" else M32


def config_for_mangled(name: str):
    """(TileConfig, fp8) of a mangled split-kernel name (Cfg<BM, BN, STAGES, FP8>), else None."""
    import re

    w = re.search(r"CfgWILb([01])EE", name)
    if w:
        return W64, bool(int(w.group(1)))

    x = re.search(r"CfgXILi(\d+)ELi(\d+)ELb([01])EE", name)
    if x:
        key = (int(x.group(1)), int(x.group(2)), x.group(3) == "1")
        cx = next(
            (c for c in EXPERIMENTAL_CONFIGS.values() if c.pv_by_dims and (c.warps, c.stages, c.reg) == key), None
        )
        return None if cx is None else (cx, key[2])
    n = re.search(r"CfgNILi(\d+)ELi(\d+)ELb([01])ELb([01])E", name)
    if n:
        w, st, f, reg = (int(x) for x in n.groups())
        key = (w, st, bool(reg))
        every = list(CONFIGS.values()) + list(EXPERIMENTAL_CONFIGS.values())
        cn = next((c for c in every if c.kind == "n8" and (c.warps, c.stages, c.reg) == key), None)
        return None if cn is None else (cn, bool(f))
    m = re.search(r"CfgILi(\d+)ELi(\d+)ELi(\d+)ELb([01])E", name)
    if not m:
        return None
    bm, bn, st, f = map(int, m.groups())
    cfg = next(
        (c for c in CONFIGS.values() if c.kind == "m" and (c.block_m, c.block_n, c.stages) == (bm, bn, st)), None
    )
    return None if cfg is None else (cfg, bool(f))
