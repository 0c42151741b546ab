#!/usr/bin/env python3
"""FlashQLA's Hopper chunk kernels as CUDA source and cubins, without a GPU, to profile beside ours.

TileLang JIT-compiles FlashQLA's kernels on first use; this runs its code generation for sm_90a on a machine with no
GPU (the target given; flash_qla's package init bypassed and the device query stubbed: both read the device) and
compiles each source with nvcc. Needs the FlashQLA site (flash_qla, tilelang, tvm_ffi: .peers/flashqla-site.tar.xz
unpacked) on a Python that has torch and matches its wheels (3.12). Shapes: the backward at issue 14's Hv = 32,
Hqk = 16; the forward (fused_fwd, no CP, final state, o) at Hqk = Hv = 16 with each value-column block FlashQLA picks
(32, 64, 128); K = V = 128, bf16, fixed length.

  python3.12 tools/flashqla_codegen.py --site /tmp/qla --out /tmp/qla_kernels
  python3 tools/sass_profile.py /tmp/qla_kernels/fused_bwd.cubin --lines 8
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import types


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", required=True, help="the directory holding flash_qla and tilelang")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.site)
    import tilelang  # noqa: E402 (from the site)
    from tilelang import tvm  # noqa: E402

    import torch  # noqa: E402

    # the kernel files alone: flash_qla's __init__ and fused_fwd.py read the device's properties
    pkg = types.ModuleType("flash_qla")
    pkg.__path__ = []
    utils = types.ModuleType("flash_qla.utils")
    utils.prepare_chunk_offsets = None  # used by the host wrappers only
    sys.modules.update({"flash_qla": pkg, "flash_qla.utils": utils})
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)

    def load(name):
        path = os.path.join(args.site, f"flash_qla/ops/gated_delta_rule/chunk/hopper/{name}.py")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    fb, ff = load("fused_bwd"), load("fused_fwd")
    common = dict(accum_dtype="float32", qkva_dtype="bfloat16", g_dtype="float32", seqlen_dtype="int32",
                  is_varlen=False, state_v_first=False)
    builds = {"fused_bwd": lambda: fb.tilelang_fused_chunk_gdr_bwd(
        32, 16, 128, 128, 64, 128**-0.5, b_dtype="float32", h_dtype="bfloat16", o_dtype="bfloat16", use_dht=True,
        **common)}
    for bdv in (32, 64, 128):
        builds[f"fused_fwd_bdv{bdv}"] = lambda bdv=bdv: ff.tilelang_fused_chunk_gdr_fwd(
            16, 16, 128, 128, 64, 128**-0.5, b_dtype="float32", h0_dtype="float32", ht_dtype="float32",
            h_dtype="bfloat16", o_dtype="bfloat16", use_initial_state=False, store_final_state=True, store_h=False,
            store_o=True, is_cp=False, block_DV=bdv, **common)
    os.makedirs(args.out, exist_ok=True)
    inc = [f"-I{args.site}/tilelang/src", f"-I{args.site}/tilelang/3rdparty/cutlass/include"]
    for name, build in builds.items():
        with tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}):
            kernel = build()
        src = os.path.join(args.out, f"{name}.cu")
        with open(src, "w") as f:
            f.write(kernel.get_kernel_source())
        cmd = ["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-lineinfo", "--use_fast_math",
               "-w", *inc, "-cubin", "-Xptxas=-v", "-o", os.path.join(args.out, f"{name}.cubin"), src]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
