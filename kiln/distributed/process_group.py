"""Process groups: ``init_process_group``, ``new_group``, ranks, and the default group.

Ranks meet through MPI: ``mpiexec`` (started by ``python -m kiln.distributed.run``) has already
connected the processes when ``init_process_group`` runs, so there is no store or port to
rendezvous on. ``init_method="env://"`` (the default) still reads the variables torchrun sets --
RANK, WORLD_SIZE, LOCAL_RANK -- and checks them against MPI's view, which catches scripts
started without ``mpiexec`` (each would be a world of one). Each group owns a duplicate of the
communicator of its ranks, so its traffic never mixes with another group's or the user's.

A group holds one backend per device type: ``"mpi"`` (also accepted as ``"gloo"``) for CPU
tensors, ``"nccl"`` for CUDA tensors; ``backend=None`` gives both (NCCL started on first use).
"""

from __future__ import annotations

import datetime
import os
import threading

from .errors import DistBackendError
from .health import Health
from .health import start as start_health

__all__ = [
    "Backend",
    "ProcessGroup",
    "GroupMember",
    "group",
    "init_process_group",
    "destroy_process_group",
    "is_initialized",
    "is_available",
    "is_mpi_available",
    "is_gloo_available",
    "is_nccl_available",
    "is_torchelastic_launched",
    "new_group",
    "get_rank",
    "get_world_size",
    "get_backend",
    "get_process_group_ranks",
    "get_global_rank",
    "get_group_rank",
    "default_group",
    "resolve_group",
    "debug_level",
]

_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_NOT_INITIALIZED = (
    "Default process group has not been initialized, please make sure to call init_process_group."
)


class Backend(str):
    """A backend name (``Backend.MPI`` == "mpi"); ``Backend("GLOO")`` normalizes the case."""

    UNDEFINED = "undefined"
    MPI = "mpi"
    GLOO = "gloo"
    NCCL = "nccl"
    backend_list = ["undefined", "mpi", "gloo", "nccl"]

    def __new__(cls, name: str):
        if not isinstance(name, str):
            raise ValueError(f"Backend constructor parameter must be string-ish, got {name!r}")
        value = name.lower()
        if value not in cls.backend_list and ":" not in value:
            raise ValueError(
                f"Invalid backend: '{name}'; kiln supports 'mpi' and 'gloo' (both run on MPI) "
                "for CPU tensors and 'nccl' for CUDA tensors"
            )
        return str.__new__(cls, value)


def _backend_per_device(backend: str | None) -> dict[str, str]:
    """``{"cpu": "mpi", "cuda": "nccl"}``-style map from a backend string."""
    if backend is None:
        return {"cpu": "mpi", "cuda": "nccl"}
    name = Backend(backend)
    if ":" in name:
        mapping = {}
        for part in name.split(","):
            device, _, engine = part.partition(":")
            mapping[device.strip()] = _engine(engine.strip())
        return mapping
    if name == Backend.NCCL:
        return {"cuda": "nccl"}
    if name == Backend.UNDEFINED:
        return {"cpu": "mpi", "cuda": "nccl"}
    return {"cpu": _engine(name)}


def _engine(name: str) -> str:
    if name in ("mpi", "gloo"):
        return "mpi"  # gloo is accepted for CPU tensors and runs on MPI
    if name == "nccl":
        return "nccl"
    raise ValueError(f"Invalid backend: '{name}'")


def debug_level() -> str:
    """``KILN_DISTRIBUTED_DEBUG``: "OFF", "INFO" or "DETAIL" ("1" means DETAIL). In DETAIL
    every collective first checks that all ranks run the same one with matching tensors."""
    value = os.environ.get("KILN_DISTRIBUTED_DEBUG", "OFF").strip().upper()
    if value in ("1", "TRUE", "YES", "DETAIL"):
        return "DETAIL"
    return "INFO" if value == "INFO" else "OFF"


_FINGERPRINT_BYTES = 512


class ProcessGroup:
    """The ranks that run collectives together and the communicator they use."""

    def __init__(
        self, name: str, ranks: list[int], comm, backends: dict[str, str], timeout: float,
        world: _World,
    ):  # fmt: skip
        self.group_name = name
        self.ranks = list(ranks)
        self.comm = comm
        self.backend_names = backends
        self.timeout = timeout
        self._world = world
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self._backends: dict[str, object] = {}
        self._check_comm = None
        self._sequence = 0
        self.bound_device_id = None

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def name(self) -> str:
        return self.backend_name()

    def backend_name(self) -> str:
        if set(self.backend_names) == {"cpu"}:
            return self._world.requested_backend or "mpi"
        return ",".join(f"{d}:{e}" for d, e in sorted(self.backend_names.items()))

    @property
    def health(self) -> Health:
        return self._world.health

    def next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def backend_for(self, device_type: str):
        """The backend that runs collectives on tensors of ``device_type``."""
        backend = self._backends.get(device_type)
        if backend is not None:
            return backend
        engine = self.backend_names.get(device_type)
        if engine is None:
            raise RuntimeError(f"No backend type associated with device type {device_type}")
        if engine == "mpi":
            from .mpi_backend import MPIBackend

            backend = MPIBackend(self._world.MPI, self.comm, self.health, self.timeout)
        else:
            from .nccl_backend import NCCLBackend

            backend = NCCLBackend(self, self.bound_device_id)
        self._backends[device_type] = backend
        return backend

    def object_backend(self):
        """The MPI backend that object collectives (pickled bytes) run on."""
        if "cpu" in self.backend_names:
            return self.backend_for("cpu")
        backend = self._backends.get("objects")
        if backend is None:
            from .mpi_backend import MPIBackend

            backend = MPIBackend(self._world.MPI, self.comm, self.health, self.timeout)
            self._backends["objects"] = backend
        return backend

    def broadcast_bytes(self, data: bytes | None, nbytes: int, root: int = 0) -> bytes:
        """Group rank ``root``'s ``nbytes`` bytes on every rank, over the group's MPI
        communicator (how the NCCL backend shares its unique id)."""
        from .work import wait_request

        MPI = self._world.MPI
        buffer = bytearray(data if self._rank == root else bytes(nbytes))
        request = self.comm.Ibcast([buffer, MPI.BYTE], root)
        wait_request(request, self.health, "the NCCL bootstrap broadcast", self.timeout)
        return bytes(buffer)

    def check_same_collective(self, fingerprint: str, what: str) -> None:
        """KILN_DISTRIBUTED_DEBUG=DETAIL: all ranks compare what they are about to run."""
        from .work import wait_request

        MPI = self._world.MPI
        if self._check_comm is None:
            self._check_comm = self.comm.Dup()
        mine = fingerprint.encode()[: _FINGERPRINT_BYTES - 1].ljust(_FINGERPRINT_BYTES, b"\0")
        everyone = bytearray(_FINGERPRINT_BYTES * self._size)
        request = self._check_comm.Iallgather([mine, MPI.BYTE], [everyone, MPI.BYTE])
        wait_request(request, self.health, f"the debug check before {what}", self.timeout)
        for r in range(self._size):
            row = bytes(everyone[r * _FINGERPRINT_BYTES : (r + 1) * _FINGERPRINT_BYTES])
            theirs = row.rstrip(b"\0").decode()
            if theirs != fingerprint:
                raise RuntimeError(
                    "Detected mismatch between collectives on ranks. Rank "
                    f"{self.ranks[self._rank]} is running collective: {fingerprint}, but Rank "
                    f"{self.ranks[r]} is running collective: {theirs}."
                )

    def free(self) -> None:
        for backend in self._backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        self._backends.clear()
        for comm in (self._check_comm, self.comm):
            if comm is not None:
                comm.Free()
        self._check_comm = None

    def __repr__(self) -> str:
        return (
            f"<kiln.distributed.ProcessGroup {self.group_name} ranks={self.ranks} "
            f"backend={self.backend_name()}>"
        )


class _NonGroupMember:
    """What ``new_group`` returns on ranks outside the group (PyTorch's sentinel)."""

    def __repr__(self) -> str:
        return "<kiln.distributed.GroupMember.NON_GROUP_MEMBER>"


class GroupMember:
    """``GroupMember.WORLD`` (the default group) and ``NON_GROUP_MEMBER``."""

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = _NonGroupMember()


class group:
    """``dist.group.WORLD``: the default process group once initialized."""

    WORLD: ProcessGroup | None = None


class _World:
    """The default group and everything made from it (one per process)."""

    def __init__(self):
        self.MPI = None
        self.health: Health | None = None
        self.default: ProcessGroup | None = None
        self.groups: list[ProcessGroup] = []
        self.requested_backend: str | None = None
        self.lock = threading.Lock()
        self.counter = 0


_world = _World()


def _seconds(timeout) -> float:
    if timeout is None:
        return _DEFAULT_TIMEOUT.total_seconds()
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)):
        return float(timeout)
    raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None


def _check_rendezvous(init_method, world_size: int, rank: int, mpi_size: int, mpi_rank: int):
    """The rank and size the caller (or torchrun's variables) asks for must be MPI's."""
    if init_method is not None and not str(init_method).startswith(("env://", "tcp://", "file://")):
        raise ValueError(
            f"init_method {init_method!r} is not supported: kiln's ranks meet through mpiexec; "
            "use init_method='env://' (the default)"
        )
    use_env = init_method is None or str(init_method).startswith("env://")
    wanted_size = world_size if world_size != -1 else (_env_int("WORLD_SIZE") if use_env else None)
    wanted_rank = rank if rank != -1 else (_env_int("RANK") if use_env else None)
    launch = "start the ranks with `python -m kiln.distributed.run --nproc-per-node N script.py`"
    if wanted_size is not None and wanted_size != mpi_size:
        raise RuntimeError(
            f"init_process_group: world size {wanted_size} was requested but MPI connected "
            f"{mpi_size} process(es); {launch} (or `mpiexec -n N python script.py`)"
        )
    if wanted_rank is not None and wanted_rank != mpi_rank:
        raise RuntimeError(
            f"init_process_group: rank {wanted_rank} was requested but MPI gave this process "
            f"rank {mpi_rank}; {launch} and let it set RANK"
        )


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store=None,
    group_name: str = "",
    pg_options=None,
    device_id=None,
) -> None:
    """Join the job's ranks into the default group (see the module docstring).

    ``timeout`` bounds how long any collective of the group waits for the other ranks before
    raising ``DistBackendError`` (default 30 minutes).
    """
    if _world.default is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if store is not None:
        raise ValueError(
            "init_process_group(store=...) is not supported: kiln's ranks meet through mpiexec"
        )
    backends = _backend_per_device(backend)
    if "cpu" not in backends:
        _check_nccl(device_id)
    from .mpi_backend import load_mpi

    MPI = load_mpi()
    world = MPI.COMM_WORLD
    _check_rendezvous(init_method, world_size, rank, world.Get_size(), world.Get_rank())
    seconds = _seconds(timeout)
    with _world.lock:
        _world.MPI = MPI
        _world.health = start_health(MPI, world)
        _world.health.exit_timeout = seconds
        _world.requested_backend = None if backend is None else str(Backend(backend))
        pg = ProcessGroup(
            "0", list(range(world.Get_size())), world.Dup(), backends, seconds, _world
        )
        if device_id is not None:
            pg.bound_device_id = device_id
        _world.default = pg
        _world.counter = 1
        group.WORLD = GroupMember.WORLD = pg


def _check_nccl(device_id) -> None:
    from .nccl import nccl_unavailable_reason

    reason = nccl_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"Distributed package doesn't have NCCL built in: {reason}")


def destroy_process_group(group_to_destroy: ProcessGroup | None = None) -> None:
    """Free a group's communicators; with no argument, every group (the default included)."""
    if _world.default is None:
        raise ValueError(_NOT_INITIALIZED)
    from .work import drain_background

    drain_background()
    if group_to_destroy is None or group_to_destroy is _world.default:
        for pg in [*_world.groups, _world.default]:
            pg.free()
        _world.groups.clear()
        _world.default = None
        group.WORLD = GroupMember.WORLD = None
        return
    if group_to_destroy is GroupMember.NON_GROUP_MEMBER:
        return
    group_to_destroy.free()
    _world.groups.remove(group_to_destroy)


def is_initialized() -> bool:
    return _world.default is not None


def is_available() -> bool:
    """True when the CPU backend (mpi4py) can be imported; does not start MPI."""
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


is_mpi_available = is_available
is_gloo_available = is_available  # "gloo" runs on the MPI backend


def is_nccl_available() -> bool:
    from .nccl import nccl_unavailable_reason

    return nccl_unavailable_reason() is None


def is_torchelastic_launched() -> bool:
    """True under kiln's launcher (which sets TORCHELASTIC_RUN_ID like torchrun)."""
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def default_group() -> ProcessGroup:
    if _world.default is None:
        raise ValueError(_NOT_INITIALIZED)
    return _world.default


def resolve_group(pg) -> ProcessGroup | None:
    """The group a collective runs on (None on ranks outside it)."""
    if pg is None:
        return default_group()
    if pg is GroupMember.NON_GROUP_MEMBER:
        return None
    if not isinstance(pg, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup or None, got {type(pg).__name__}")
    if _world.default is None:
        raise ValueError(_NOT_INITIALIZED)
    return pg


def new_group(
    ranks=None,
    timeout: datetime.timedelta | None = None,
    backend: str | None = None,
    pg_options=None,
    use_local_synchronization: bool = False,
    group_desc: str | None = None,
    device_id=None,
):
    """A group of the given global ``ranks`` (all ranks must call it, as in PyTorch).

    Returns ``GroupMember.NON_GROUP_MEMBER`` on ranks that are not in ``ranks``."""
    world = default_group()
    n = world.size()
    members = sorted(set(range(n) if ranks is None else ranks))
    for r in members:
        if not isinstance(r, int) or not 0 <= r < n:
            raise ValueError(f"new_group: rank {r!r} is not a rank of the world of size {n}")
    MPI = _world.MPI
    me = world.rank()
    color = 0 if me in members else MPI.UNDEFINED
    comm = world.comm.Split(color, members.index(me) if me in members else 0)
    with _world.lock:
        name = str(_world.counter)
        _world.counter += 1
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    backends = world.backend_names if backend is None else _backend_per_device(backend)
    seconds = world.timeout if timeout is None else _seconds(timeout)
    pg = ProcessGroup(name, members, comm, backends, seconds, _world)
    pg.bound_device_id = device_id if device_id is not None else world.bound_device_id
    _world.groups.append(pg)
    return pg


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (the default group: its global rank); -1 outside it."""
    pg = resolve_group(group)
    return -1 if pg is None else pg.rank()


def get_world_size(group=None) -> int:
    pg = resolve_group(group)
    return -1 if pg is None else pg.size()


def get_backend(group=None) -> str:
    pg = resolve_group(group)
    if pg is None:
        raise ValueError("Invalid process group specified")
    return pg.backend_name()


def get_process_group_ranks(group) -> list[int]:
    pg = resolve_group(group)
    return [] if pg is None else list(pg.ranks)


def get_global_rank(group, group_rank: int) -> int:
    pg = resolve_group(group)
    if pg is None or not 0 <= group_rank < pg.size():
        raise ValueError(f"Group rank {group_rank} is not part of group {pg}")
    return pg.ranks[group_rank]


def get_group_rank(group, global_rank: int) -> int:
    pg = resolve_group(group)
    if pg is None or global_rank not in pg.ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {pg}")
    return pg.ranks.index(global_rank)


def broken_error() -> DistBackendError | None:
    """The failure that broke this process's groups, if any."""
    health = _world.health
    return None if health is None else health.broken
