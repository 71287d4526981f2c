"""Distributed training: a lock server, partition servers and trainers as separate processes.

Every role is its own command (`tessera lock-server`, `tessera partition-server --rank R`,
`tessera train --rank R`) and all of them meet through torch.distributed.rpc (TensorPipe)
after a rendezvous at `distributed_init_method`, which the lock server hosts. The lock server
hands out buckets so that no partition is held by two trainers at once; partition servers
keep the partitions no trainer holds; parameter servers (inside the partition servers, or the
lock server when there are none) keep the shared model parameters that trainers synchronise
asynchronously. Trainers run the same bucket loop as one machine does
(`tessera.training.coordinator.TrainingRun`), with the lock server as the bucket source and
the partition servers as the partition source.
"""
