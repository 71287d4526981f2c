"""The training loop: schedule, optimizers, partitions in memory, Hogwild workers, coordinator."""
