"""Joining and leaving the world of a distributed job, with every wait bounded.

The lock server hosts a TCP store at `distributed_init_method`. Each process first reaches it
(bounded: an unreachable lock server is an error naming its address), writes who it is (role,
host, address, pid) and waits until every rank has done the same (bounded: the error names
the ranks that never came). Only then does it start torch.distributed.rpc with the TensorPipe
backend over that same store, so the RPC handshake itself never waits for an absent peer.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch.distributed as dist
import torch.distributed.rpc as rpc

from ..errors import EXIT_TRANSIENT, TransientError
from ..vocabulary import Role
from .remote import Peers
from .settings import DistributedSettings
from .world import PeerInfo, WorldLayout

JOINED_KEY = "tessera/joined/{rank}"
# TCP only: shared-memory and cross-memory channels cannot cross pod boundaries.
TRANSPORTS = ["uv"]
CHANNELS = ["basic"]
RPC_THREADS = 16


@dataclass
class World:
    """This process's place in the job and its peers."""

    layout: WorldLayout
    rank: int
    name: str
    peers: Peers
    settings: DistributedSettings
    store: dist.TCPStore  # kept open: on the lock server it is the rendezvous itself

    @property
    def lock_server(self) -> str:
        return Role.LOCK_SERVER.value


def join_world(layout: WorldLayout, role: Role, role_rank: int,
               settings: DistributedSettings) -> World:
    """Meet every other process of the job and start RPC; raises TransientError (naming who
    or what is missing) if that does not happen within the rendezvous time-out."""
    rank = layout.rank_of(role, role_rank)
    name = layout.name_of(rank)
    deadline = time.monotonic() + settings.rendezvous_timeout
    store = _open_store(rank, settings, deadline)
    me = PeerInfo(rank=rank, name=name, host=socket.gethostname(),
                  address=_local_address(settings), pid=os.getpid())
    store.set(JOINED_KEY.format(rank=rank), json.dumps(asdict(me)))
    infos = _wait_for_everyone(store, layout, name, settings, deadline)
    _start_rpc(name, rank, layout.world_size, settings)
    peers = Peers({info.name: info for info in infos}, settings.call_timeout)
    return World(layout, rank, name, peers, settings, store)


def leave_world(graceful: bool, timeout: float) -> None:
    """Stop RPC: gracefully (waiting for every peer to get here) when the job is done, at
    once when it failed. A graceful stop that times out falls back to the immediate one."""
    if graceful:
        try:
            rpc.shutdown(graceful=True, timeout=timeout)
            return
        except Exception:  # noqa: BLE001 - a peer already gone; nothing is left to wait for
            pass
    try:
        rpc.shutdown(graceful=False)
    except Exception:  # noqa: BLE001 - RPC was not running any more
        pass


def _open_store(rank: int, settings: DistributedSettings, deadline: float) -> dist.TCPStore:
    host, port = settings.host, settings.port
    timeout = timedelta(seconds=max(1.0, deadline - time.monotonic()))
    if rank == 0:
        try:
            # Listens on every interface; its own client connects through the loopback.
            return dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                                 timeout=timeout, wait_for_workers=False, multi_tenant=True)
        except RuntimeError as error:
            raise TransientError(f"lock-server: cannot listen for the rendezvous on port "
                                 f"{port} ({error}); is another lock server running "
                                 "there?") from error
    _wait_until_listening(host, port, deadline, settings)
    try:
        return dist.TCPStore(host, port, world_size=None, is_master=False, timeout=timeout,
                             wait_for_workers=False)
    except RuntimeError as error:
        raise TransientError(f"cannot reach the lock server's rendezvous at {host}:{port}: "
                             f"{error}") from error


def _wait_until_listening(host: str, port: int, deadline: float,
                          settings: DistributedSettings) -> None:
    """Poll until the lock server accepts connections (the store's own client would log a
    stack trace for every refused attempt)."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=2.0):
                return
        except OSError as error:
            if time.monotonic() > deadline:
                raise TransientError(
                    f"the lock server's rendezvous at {host}:{port} did not answer within "
                    f"{settings.rendezvous_timeout:g} s ({error}); is the lock server "
                    "running, and is distributed_init_method (or --init-method) its "
                    "address?") from error
            time.sleep(0.2)


def _local_address(settings: DistributedSettings) -> str:
    """The IP this host uses to reach the lock server (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((settings.host, settings.port))
            return str(probe.getsockname()[0])
    except OSError:
        return "unknown address"


def _wait_for_everyone(store: dist.TCPStore, layout: WorldLayout, name: str,
                       settings: DistributedSettings, deadline: float) -> list[PeerInfo]:
    keys = [JOINED_KEY.format(rank=rank) for rank in range(layout.world_size)]
    # Polled rather than store.wait(), whose time-out logs a C++ warning of its own.
    while not store.check(keys):
        if time.monotonic() > deadline:
            missing = [layout.name_of(rank) for rank, key in enumerate(keys)
                       if not store.check([key])]
            raise TransientError(
                f"{name} waited {settings.rendezvous_timeout:g} s at the rendezvous "
                f"{settings.host}:{settings.port}, but {', '.join(missing)} never joined; are "
                "all roles started, with the same num_machines and num_partition_servers?")
        time.sleep(0.05)
    return [PeerInfo(**json.loads(store.get(key))) for key in keys]


def _start_rpc(name: str, rank: int, world_size: int, settings: DistributedSettings) -> None:
    # The master reuses the store above (it is multi-tenant) through the loopback.
    host = "127.0.0.1" if rank == 0 else settings.host
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{host}:{settings.port}", rpc_timeout=settings.call_timeout,
        num_worker_threads=RPC_THREADS, _transports=TRANSPORTS, _channels=CHANNELS)
    # Everyone has joined, so the handshake is quick; a peer dying in the middle of it would
    # leave it waiting, which the watchdog turns into an exit.
    watchdog = threading.Timer(settings.rendezvous_timeout, _handshake_timed_out,
                               args=(name, settings))
    watchdog.daemon = True
    watchdog.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's own deprecation notice
            rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    finally:
        watchdog.cancel()


def _handshake_timed_out(name: str, settings: DistributedSettings) -> None:
    print(f"tessera {name}: error: the RPC handshake with the other roles at "
          f"{settings.host}:{settings.port} did not finish within "
          f"{settings.rendezvous_timeout:g} s", file=sys.stderr, flush=True)
    os._exit(EXIT_TRANSIENT)
