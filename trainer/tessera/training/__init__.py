"""The training loop: schedule, batching, optimizers, Hogwild workers, coordinator."""
