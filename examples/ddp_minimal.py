"""The notes' "PyTorch DDP 最小示例", runnable as written (plus the data and a model):

    python -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp_minimal.py
    (or: torchrun --standalone --nproc-per-node 2 examples/ddp_minimal.py)

With a GPU per process this is the notes' code exactly: NCCL and torch.cuda.set_device
(LOCAL_RANK) - untested here, the course machines have no GPU. Without, gloo on CPU.
`labkit.init_process_group()` makes that choice; everything else is plain torch.
"""
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import labkit
from labkit.check.ddp import replicas_in_sync
from labkit.i18n import tr                             # the printed line in the learner's language
from labkit.toy_models import GPTConfig, TinyGPT, lm_loss, token_batch


@dataclass
class Output:
    loss: torch.Tensor


class MyModel(nn.Module):
    """A small GPT whose forward returns an object with `.loss`, as `model(batch).loss` expects."""

    def __init__(self):
        super().__init__()
        self.gpt = TinyGPT(GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=2, n_embd=64))

    def forward(self, batch):
        inputs, targets = batch
        return Output(lm_loss(self.gpt(inputs), targets))


torch.manual_seed(0)                                   # the data set: same on every rank
inputs, targets = token_batch(96, 32, 256, seed=0)
dataset = TensorDataset(inputs, targets)

labkit.init_process_group()                            # dist.init_process_group(backend="nccl") on GPUs
local_rank = int(os.environ["LOCAL_RANK"])
device = labkit.device()                               # cuda:LOCAL_RANK after set_device, else cpu

model = MyModel().to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
sampler = DistributedSampler(dataset)                  # DistributedSampler 保证分片
loader = DataLoader(dataset, batch_size=8, sampler=sampler)

for epoch in range(3):
    sampler.set_epoch(epoch)                           # a new shuffle each epoch, same on every rank
    total = torch.zeros(2, device=device)
    for batch in loader:
        batch = [t.to(device) for t in batch]
        loss = model(batch).loss
        loss.backward()                                # 反向累积本地梯度
        optimizer.step()                               # DDP 已在 backward 中触发 AllReduce
        optimizer.zero_grad(set_to_none=True)
        total += torch.stack([loss.detach(), torch.ones((), device=device)])
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        print(tr("epoch {epoch}: mean loss {loss:.4f} over {batches} rank-batches on {ranks} ranks",
                 epoch=epoch, loss=total[0].item() / total[1].item(), batches=int(total[1].item()),
                 ranks=dist.get_world_size()))

replicas_in_sync(model)                                # prints one line on rank 0
dist.barrier()                                         # nobody closes its sockets while a peer still reads
dist.destroy_process_group()
# With torch 2.13 + gloo + DDP on this CPU machine, about 1 run in 4 under load aborts *after*
# this line, at interpreter exit, in a C++ destructor ("terminate called without an active
# exception"), on one or both ranks. All work is done by then; leave without running C++
# static destructors so torchrun does not report a failure. (Root cause not found yet.)
sys.stdout.flush()
os._exit(0)
