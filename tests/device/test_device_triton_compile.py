"""Every fused Triton kernel compiles for a Hopper GPU (sm_90), here, without a GPU.

Triton's interpreter (which runs the kernels in the CPU tests) does not type-check like the
compiler does: a kernel can pass every interpreted test and still be refused on the GPU.
Compiling for an explicit target catches that in CI, which has no GPU.
"""

from _device_helpers import NEEDS_TRITON

pytestmark = NEEDS_TRITON

F64, I64, I32, F32 = "*fp64", "*i64", "i32", "fp32"
INTS = ["slot0", "src0", "len0", "slot1", "src1", "len1", "prio_stride", "inc"]
CASES = {
    "write_leaves": (
        {
            "leaves_ptr": F64,
            "prio_ptr": "*fp32",
            "maxbits_ptr": I64,
            "counters_ptr": I64,
            **dict.fromkeys(INTS, I32),
            "alpha": F32,
        },
        [{"FLOOR": 1e-292, "MODE": 0, "BLOCK": 1024}, {"FLOOR": 1e-292, "MODE": 1, "BLOCK": 1024}],
    ),
    "update_leaves": (
        {
            "leaves_ptr": F64,
            "ids_ptr": I64,
            "prio_ptr": "*fp32",
            "maxbits_ptr": I64,
            "counters_ptr": I64,
            "n": I32,
            "capacity": I32,
            "alpha": F32,
        },
        [{"FLOOR": 1e-292, "BLOCK": 128}],
    ),
    "block_stats": ({"leaves_ptr": F64, "bsum_ptr": F64, "bmin_ptr": F64}, [{"B": 1024}]),
    "query": (
        {
            "leaves_ptr": F64,
            "bsum_ptr": F64,
            "bmin_ptr": F64,
            "u_ptr": F64,
            "slots_ptr": I64,
            "ids_ptr": I64,
            "weights_ptr": "*fp32",
            "counters_ptr": I64,
            "count": I32,
            "nblocks": I32,
            "capacity": I32,
            "beta": F32,
        },
        [{"NB": 1024, "B": 1024, "QB": 1}, {"NB": 1, "B": 256, "QB": 1}],
    ),
}


_SCRIPT = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ostinato.device.torch import triton_kernels as tk
cases = json.loads(sys.argv[1])
for name, (signature, variants) in cases.items():
    fn = getattr(tk, name)
    for consts in variants:
        full = {**signature, **dict.fromkeys(consts, "constexpr")}
        src = ASTSource(fn, full, constexprs={(fn.arg_names.index(k),): v
                                              for k, v in consts.items()})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        assert "cubin" in kernel.asm, name
        print("compiled", name, consts)
"""


def test_every_kernel_compiles_for_sm90():
    # In a fresh process without TRITON_INTERPRET: the kernels are defined (and Triton's own
    # library loaded) as for a GPU.
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(CASES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("compiled") == sum(len(v) for _, v in CASES.values())
