"""The measured cases of gpu_capture.py: ResNet-50, Hugging Face BERT/GPT-2, torchvision
Mask R-CNN training steps; the CPU optimizer step; host<->device copies."""
from __future__ import annotations

import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpu_measure import RESULTS, log, profile, record, save, set_tf32, timed

# --------------------------------------------------------------------------- ResNet-50 v1.5
class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --------------------------------------------------------------------------- cases
def resnet(dev: str, amp: bool, channels_last: bool, batch: int, iters: int, trace: bool):
    set_tf32(True)
    torch.backends.cudnn.benchmark = True
    mf = torch.channels_last if channels_last else torch.contiguous_format
    model = ResNet50().to(dev).to(memory_format=mf)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(dev, enabled=amp and dev == "cuda")
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=mf)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=torch.float16 if dev == "cuda" else torch.bfloat16,
                            enabled=amp):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    name = f"resnet50_b{batch}_{'amp' if amp else 'tf32'}_{'nhwc' if channels_last else 'nchw'}"
    case = {"case": name, "model": "resnet-50", "batch": batch, "amp": amp,
            "channels_last": channels_last, "optimizer": "sgd-momentum",
            "step_s": timed(step, 5, iters, dev)}
    if trace:
        case["kernels"] = profile(step, name, dev)
    record(case)


def _hf_model(dev: str, kind: str, attn: str, pad_vocab: int):
    """(model, config) of a Hugging Face model built from its config on ``dev``."""
    import transformers as tr

    def padded(vocab: int) -> int:
        return -(-vocab // pad_vocab) * pad_vocab

    if kind.startswith("bert"):
        layers, hidden, heads = {"bert-large": (24, 1024, 16), "bert-tiny": (2, 64, 2)}[kind]
        cfg = tr.BertConfig(vocab_size=padded(30522), hidden_size=hidden,
                            num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * hidden,
                            max_position_embeddings=512, attn_implementation=attn)
        cls = tr.BertForPreTraining
    elif kind.startswith("llama"):
        # Llama-2-7B's block (hidden 4096, SwiGLU 11008, 32 heads, RMSNorm, rotary), 4 layers
        layers, hidden, heads, ffn = {"llama-2-7b-4l": (4, 4096, 32, 11008),
                                      "llama-tiny": (2, 64, 2, 172)}[kind]
        cfg = tr.LlamaConfig(vocab_size=padded(32000), hidden_size=hidden,
                             intermediate_size=ffn, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads,
                             max_position_embeddings=4096, rms_norm_eps=1e-5,
                             attn_implementation=attn)
        cls = tr.LlamaForCausalLM
    else:
        layers, hidden, heads = {"gpt2-medium": (24, 1024, 16), "gpt2-xl": (48, 1600, 25),
                                 "tiny": (2, 64, 2)}[kind]
        cfg = tr.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=1024,
                            vocab_size=padded(50257), attn_implementation=attn)
        cls = tr.GPT2LMHeadModel
    with torch.device(dev):
        return cls(cfg), cfg


def hf_case(dev: str, kind: str, amp_dtype, batch: int, seq: int, attn: str, iters: int,
            trace: bool, label: str, pad_vocab: int = 1, compiled: bool = False):
    """``pad_vocab``: round the vocabulary up to a multiple of this (Megatron pads to 128
    per tensor-parallel rank; 64 here); ``compiled``: ``torch.compile`` the model (Inductor
    fuses the elementwise work)."""
    set_tf32(True)
    model, cfg = _hf_model(dev, kind, attn, pad_vocab)
    bert = kind.startswith("bert")
    model = model.to(dev).train()
    vocab = cfg.vocab_size
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if compiled:
        model = torch.compile(model)
    ids = torch.randint(0, vocab, (batch, seq), device=dev)
    kw = {"input_ids": ids, "labels": ids}
    if bert:
        kw["token_type_ids"] = torch.zeros_like(ids)
        kw["next_sentence_label"] = torch.zeros(batch, dtype=torch.long, device=dev)
    amp = amp_dtype is not None
    scaler = torch.amp.GradScaler(dev, enabled=amp_dtype == torch.float16 and dev == "cuda")

    def fwd_bwd():
        with torch.autocast(dev, dtype=amp_dtype or torch.float32, enabled=amp):
            loss = model(**kw).loss
        scaler.scale(loss).backward()

    def opt_step():
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def full():
        fwd_bwd()
        opt_step()

    name = f"{kind}_{label}"
    t0 = time.time()
    case = {"case": name, "model": kind, "batch": batch, "seq": seq, "attention": attn,
            "vocab": vocab, "compiled": compiled,
            "precision": str(amp_dtype).replace("torch.", "") if amp else "tf32",
            "optimizer": "adamw", "params": params,
            "fwd_bwd_s": timed(fwd_bwd, 3, iters, dev), "step_s": timed(full, 2, iters, dev)}
    case["setup_and_timing_wall_s"] = time.time() - t0
    if trace:
        case["kernels"] = profile(full, name, dev)
    record(case)


def maskrcnn(dev: str, amp: bool, batch: int, iters: int):
    import torchvision
    set_tf32(True)
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=832, max_size=1344,
        trainable_backbone_layers=5).to(dev).train()
    g = torch.Generator(device="cpu").manual_seed(0)
    imgs, targets = [], []
    for _ in range(batch):
        imgs.append(torch.rand(3, 832, 1344, generator=g).to(dev))
        n = 8
        xy = torch.rand(n, 2, generator=g) * torch.tensor([1100.0, 600.0])
        wh = 40 + torch.rand(n, 2, generator=g) * 200
        boxes = torch.cat([xy, xy + wh], 1)
        masks = torch.zeros(n, 832, 1344, dtype=torch.uint8)
        for i, b in enumerate(boxes.round().long()):
            masks[i, b[1]:b[3], b[0]:b[2]] = 1
        targets.append({"boxes": boxes.to(dev), "labels": torch.randint(1, 91, (n,), generator=g)
                        .to(dev), "masks": masks.to(dev)})
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(dev, enabled=amp and dev == "cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=torch.float16, enabled=amp and dev == "cuda"):
            losses = model(imgs, targets)
            loss = sum(losses.values())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    name = f"maskrcnn_b{batch}_{'amp' if amp else 'tf32'}"
    case = {"case": name, "model": "torchvision maskrcnn_resnet50_fpn", "batch": batch,
            "amp": amp, "image": [832, 1344], "objects_per_image": 8,
            "step_s": timed(step, 3, iters, dev)}
    case["kernels"] = profile(step, name, dev, keep=(batch == 2 and not amp))
    record(case)


def host_optimizer(threads: list[int], numel: int):
    """CPU optimizer step rate: params + grads (+ state) as one step of torch.optim."""
    res = []
    for dtype in (torch.float32, torch.float16):
        params = [torch.zeros(numel // 8, dtype=dtype).requires_grad_() for _ in range(8)]
        for p in params:
            p.grad = torch.full_like(p, 1e-3)
        for opt_name in ("sgd", "adam"):
            if opt_name == "sgd":
                opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False)
            else:
                opt = torch.optim.Adam(params, lr=1e-3, foreach=False)
            for t in threads:
                torch.set_num_threads(t)
                opt.step()
                best = min(_wall(opt.step) for _ in range(3))
                res.append({"dtype": str(dtype).replace("torch.", ""), "optimizer": opt_name,
                            "threads": t, "params": numel, "step_s": best,
                            "params_per_s": numel / best})
                log(f"host {opt_name} {dtype} threads {t}: {numel / best / 1e9:.3f} Gparam/s")
    torch.set_num_threads(os.cpu_count() or 1)
    RESULTS["host_optimizer"] = res
    save()


def _wall(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def copies(nbytes: int):
    res = []
    dev_buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    for pinned in (True, False):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        host.fill_(1)
        for direction in ("h2d", "d2h"):
            def go():
                if direction == "h2d":
                    dev_buf.copy_(host, non_blocking=pinned)
                else:
                    host.copy_(dev_buf, non_blocking=pinned)
            t = timed(go, 2, 5, "cuda")
            res.append({"pinned": pinned, "direction": direction, "bytes": nbytes,
                        "seconds": min(t), "GB_per_s": nbytes / min(t) / 1e9})
            log(f"copy {direction} pinned={pinned}: {nbytes / min(t) / 1e9:.1f} GB/s")
    RESULTS["copies"] = res
    save()


def gpu_optimizer(dev: str, numel: int, iters: int):
    """GPU optimizer step of fp32 tensors: AdamW (weight decay) and SGD with momentum and
    decay, foreach (PyTorch's default) and fused, with and without a GradScaler's unscale
    pass (fp16 gradients scaled, as AMP runs them); median seconds per step."""
    res = []
    params = [torch.zeros(numel // 16, device=dev).requires_grad_() for _ in range(16)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    for opt_name in ("adam", "sgd"):
        for impl in ("foreach", "fused"):
            kw = {"foreach": True} if impl == "foreach" else {"fused": True}
            if opt_name == "adam":
                opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)
            else:
                opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4, **kw)
            for scaled in (False, True):
                scaler = torch.amp.GradScaler(dev, enabled=scaled and dev == "cuda")
                scaler.scale(torch.ones((), device=dev))    # its scale, as scale(loss) makes

                def step():
                    scaler.step(opt)
                    scaler.update()
                t = sorted(timed(step, 2, iters, dev))
                res.append({"optimizer": opt_name, "impl": impl, "grad_scaler": scaled,
                            "params": numel, "step_s": t[len(t) // 2]})
                log(f"gpu {opt_name} {impl} scaler={scaled}: {t[len(t) // 2] * 1e3:.2f} ms")
    RESULTS["gpu_optimizer"] = res
    save()
