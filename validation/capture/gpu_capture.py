"""Real single-GPU measurements for validation/gpu/: one prepared run, a few minutes long.

Run on a machine with one NVIDIA GPU and PyTorch (+ torchvision, transformers)::

    OUT=/some/dir python3 validation/capture/gpu_capture.py            # the real run
    OUT=/tmp/smoke python3 validation/capture/gpu_capture.py --smoke   # CPU, tiny shapes

The cases are in ``gpu_cases.py``, the timing and profiling in ``gpu_measure.py``. It
writes ``$OUT/gpu_measurements.json`` after every case (so a run cut short keeps what it
measured), PyTorch profiler traces of one training step (``*_trace.json.gz``, Chrome/Kineto
JSON as ``torch.profiler`` exports it) and ``gpu_capture.log``. What it measures, each timed
on the GPU with CUDA events around back-to-back steps after warm-up (no host sync inside the
timed steps except the ones the training loop itself makes, e.g. GradScaler's):

* ResNet-50 v1.5 (written out in gpu_cases.py: stride on the 3x3 convolution, as the catalog's
  ``resnet-50``) training steps, synthetic data on the GPU, SGD with momentum: batch 256 in
  AMP (fp16 autocast + GradScaler; NCHW and channels_last) and TF32.
* BERT-large pre-training (transformers ``BertForPreTraining``, MLM + NSP heads) at seq 128:
  forward + backward per micro-batch and the AdamW step, AMP, ``sdpa`` and ``eager``
  attention; TF32.
* GPT-2 medium and XL (transformers ``GPT2LMHeadModel``, ``sdpa``), seq 1024, bf16 autocast;
  GPT-2 medium and BERT-large also with the vocabulary padded to a multiple of 64 and under
  ``torch.compile``; ResNet-50 TF32 in channels_last.
* Llama-2-7B's decoder block, 4 layers (transformers ``LlamaForCausalLM``: RMSNorm, SwiGLU,
  rotary, vocabulary 32,000), one sequence of 4,096 tokens, bf16 autocast, eager and
  compiled.
* torchvision Mask R-CNN (ResNet-50-FPN) at 832x1344, batch 2 and 4, TF32 and AMP, with the
  profiler's per-kernel totals (how much of the step is convolution and GEMM).
* The GPU optimizer step alone: AdamW and SGD with momentum, foreach and fused, with and
  without a GradScaler, over 512 Mi fp32 parameters.
* Host: the CPU optimizer step (SGD with momentum as ``torch.optim.SGD`` runs it with
  ``foreach=False``, and Adam) on fp32 and fp16 tensors at 1, 4 and all threads; pinned and
  pageable host<->device copies.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import torch

import gpu_measure as gm
from gpu_cases import copies, gpu_optimizer, hf_case, host_optimizer, maskrcnn, resnet


def meta(dev: str):
    m = {"python": sys.version.split()[0], "torch": torch.__version__, "host": platform.node(),
         "cpu_count": os.cpu_count(), "platform": platform.platform(),
         "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        m["cpu_model"] = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                              if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    for mod in ("torchvision", "transformers"):
        try:
            m[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001
            m[mod] = f"unavailable: {exc!r}"[:200]
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        m.update(gpu=p.name, sm_count=p.multi_processor_count, gpu_mem_bytes=p.total_memory,
                 cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
        try:
            m["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,"
                 "power.limit,memory.total", "--format=csv"], capture_output=True, text=True,
                timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            m["nvidia_smi"] = repr(exc)
    gm.RESULTS["meta"] = m
    gm.save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: checks the code")
    ap.add_argument("--only", default="", help="comma-separated case keys, in this order "
                    "(default: all; the keys are the plan's in main())")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="start no new case after this many seconds")
    args = ap.parse_args()
    os.makedirs(gm.OUT, exist_ok=True)
    gm.LOG = open(os.path.join(gm.OUT, "gpu_capture.log"), "w")
    dev = "cpu" if args.smoke else "cuda"
    meta(dev)
    gm.log(json.dumps(gm.RESULTS["meta"]))
    torch.manual_seed(0)

    def z(full, tiny):  # the real size, or the smoke test's
        return tiny if args.smoke else full

    bert, gpt_m = z("bert-large", "bert-tiny"), z("gpt2-medium", "tiny")
    gpt_xl, llama = z("gpt2-xl", "tiny"), z("llama-2-7b-4l", "llama-tiny")
    fp16 = z(torch.float16, torch.bfloat16)  # CPU autocast takes bf16
    plan = [
        ("host", host_optimizer, ([1, 4, os.cpu_count() or 1], z(64 * 2**20, 2**20))),
        ("gpu-optimizer", gpu_optimizer, (dev, z(512 * 2**20, 2**16), z(10, 2))),
        ("rn50-amp", resnet, (dev, True, False, z(256, 4), z(20, 2), True)),
        ("rn50-amp-nhwc", resnet, (dev, True, True, z(256, 4), z(20, 2), False)),
        ("rn50-tf32", resnet, (dev, False, False, z(256, 4), z(15, 2), True)),
        ("rn50-tf32-nhwc", resnet, (dev, False, True, z(256, 4), z(15, 2), False)),
        ("gpt2m", hf_case, (dev, gpt_m, torch.bfloat16, z(16, 2), z(1024, 32), "sdpa",
                            z(10, 2), True, "bf16_sdpa")),
        ("gpt2m-pad", hf_case, (dev, gpt_m, torch.bfloat16, z(16, 2), z(1024, 32), "sdpa",
                                z(10, 2), False, "bf16_sdpa_pad64", 64)),
        ("gpt2m-pad-compiled", hf_case, (dev, gpt_m, torch.bfloat16, z(16, 2), z(1024, 32),
                                         "sdpa", z(10, 2), True, "bf16_sdpa_pad64_compiled",
                                         64, True)),
        ("bert", hf_case, (dev, bert, fp16, z(256, 2), z(128, 16), "sdpa", z(10, 2), True,
                           "fp16_sdpa")),
        ("bert-eager", hf_case, (dev, bert, fp16, z(256, 2), z(128, 16), "eager", z(10, 2),
                                 False, "fp16_eager")),
        ("bert-tf32", hf_case, (dev, bert, None, z(128, 2), z(128, 16), "sdpa", z(6, 2), False,
                                "tf32_sdpa")),
        ("bert-pad-compiled", hf_case, (dev, bert, fp16, z(256, 2), z(128, 16), "sdpa",
                                        z(10, 2), True, "fp16_sdpa_pad64_compiled", 64, True)),
        ("llama", hf_case, (dev, llama, torch.bfloat16, 1, z(4096, 32), "sdpa", z(10, 2), True,
                            "bf16_sdpa")),
        ("llama-compiled", hf_case, (dev, llama, torch.bfloat16, 1, z(4096, 32), "sdpa",
                                     z(10, 2), True, "bf16_sdpa_compiled", 1, True)),
        ("gpt2xl", hf_case, (dev, gpt_xl, torch.bfloat16, z(8, 2), z(1024, 32), "sdpa",
                             z(8, 2), False, "bf16_sdpa")),
    ]
    if not args.smoke:
        plan.insert(1, ("copies", copies, (1 << 30,)))
        plan += [(f"maskrcnn-b{b}{'-amp' if amp else ''}", maskrcnn, (dev, amp, b, 8))
                 for b in (2, 4) for amp in (False, True)]
    if args.only:
        keep = args.only.split(",")
        unknown = sorted(set(keep) - {k for k, _, _ in plan})
        if unknown:
            sys.exit(f"--only: unknown case(s) {', '.join(unknown)}")
        plan = sorted((p for p in plan if p[0] in keep), key=lambda p: keep.index(p[0]))
    for _key, fn, a in plan:
        if time.time() - gm.T0 > args.budget_s:
            gm.log(f"budget spent: skipping {fn.__name__}{a}")
            gm.RESULTS["errors"].append({"where": fn.__name__, "args": repr(a)[:200],
                                      "error": "skipped: time budget"})
            continue
        gm.guarded(fn, *a)
    gm.RESULTS["meta"]["wall_s"] = time.time() - gm.T0
    gm.save()
    gm.log("done")


if __name__ == "__main__":
    main()
