"""A real Slurm cluster of one or two nodes in a temporary directory, for tests.

``munged``, ``slurmctld`` and one ``slurmd`` per node (Debian packages ``munge`` and ``slurm-wlm``, which
``make test`` installs) run in the foreground as children of the test process, with their own key,
socket, state, spool, pid and log files under the directory and the controller and node daemons on free
loopback ports, so nothing in ``/etc`` or ``/run`` is touched and nothing outlives the test: :meth:`stop`
ends each daemon by the pid it was started with. Jobs find the cluster through ``SLURM_CONF``, which
``sbatch`` passes on to them with the rest of the environment.

Two nodes are two ``slurmd -N <node>`` on this host, each with its own port, spool, pid and log file (``%n``).
A node's name is also the host a multi-node job's rendezvous connects to (``scontrol show hostnames``), so
the names are ones that resolve to this host: its host name and ``localhost``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PARTITION = "debug"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    """The node's RealMemory as slurmd measures it (MemTotal); a larger value would mark the node invalid."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


class SlurmCluster:
    """One controller and ``nodes`` nodes (this host, on 127.0.0.1), configured and started under ``root``."""

    def __init__(self, root: Path, nodes: int = 1):
        self.root = root
        host = socket.gethostname().split(".")[0]
        names = [host] + [name for name in ("localhost",) if name != host]
        if not 1 <= nodes <= len(names):
            raise ValueError(f"the test cluster runs 1 to {len(names)} nodes on this host, not {nodes}")
        self.nodes = names[:nodes]
        self.node = self.nodes[0]
        self.cpus = os.cpu_count() or 1
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.socket"
        self.processes: dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> dict[str, str]:
        """The environment a client command (sbatch, squeue, scontrol) needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        munge = self.munge_socket.parent
        munge.mkdir(mode=0o700, parents=True)
        key = munge / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        for name in ("state", "spool", "log", "run"):
            (self.root / name).mkdir()
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=persetrain-test",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={_free_port()}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool'}.%n",
                    f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}.%n",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd.log'}.%n",
                    # No cgroups in a container: track processes through /proc and bind no tasks to CPUs.
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "SchedulerType=sched/backfill",
                    "MpiDefault=none",
                    "SwitchType=switch/none",
                    "ReturnToService=2",
                    "JobRequeue=1",
                    "KillWait=30",
                    "MinJobAge=600",
                    "InactiveLimit=0",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    *(
                        f"NodeName={node} NodeHostname={self.node} NodeAddr=127.0.0.1 Port={_free_port()} "
                        f"CPUs={self.cpus} RealMemory={_memory_mb()} State=UNKNOWN"
                        for node in self.nodes
                    ),
                    f"PartitionName={PARTITION} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("w")
        self.processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )

    def start(self, timeout: float = 60) -> None:
        if os.geteuid() != 0:
            raise RuntimeError(
                "the test cluster runs slurmctld/slurmd as root (SlurmUser=root, jobs of any user): "
                "run the Slurm tests as root, as CI does"
            )
        for daemon in ("munged", "slurmctld", "slurmd"):
            if shutil.which(daemon) is None and not Path("/usr/sbin", daemon).exists():
                raise RuntimeError(f"{daemon} is not installed: run `make test` (it installs slurm-wlm and munge)")
        self._write_config()
        m = self.munge_socket.parent
        self._spawn(
            "munged",
            [
                "/usr/sbin/munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={m / 'munge.key'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--seed-file={m / 'munged.seed'}",
                f"--log-file={m / 'munged.log'}",
            ],
        )
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged did not create its socket")
        # -i: ignore state files of a previous cluster; -D: foreground, so the pid is the daemon's own.
        self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(self._controller_up, timeout, "slurmctld did not answer")
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["/usr/sbin/slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait(self._node_idle, timeout, f"slurmd did not register {len(self.nodes)} idle node(s)")

    def _controller_up(self) -> bool:
        return self.run("scontrol", "ping", check=False).stdout.count("is UP") > 0

    def _node_idle(self) -> bool:
        return self.run("sinfo", "-h", "-o", "%T %D", check=False).stdout.strip() == f"idle {len(self.nodes)}"

    def _wait(self, ready, timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{message} within {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.2)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, check=check, timeout=60)

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")) + [self.munge_socket.parent / "munged.log"]:
            if path.exists():
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel the jobs still queued or running, then end every daemon this object started by its pid."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", *jobs, check=False)
                deadline = time.monotonic() + 60
                while self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
        for name in reversed(list(self.processes)):
            proc = self.processes.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
