"""Reading pods: role and run from labels, and why a pod failed or is stuck, without secrets."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from operator_support import lease_held_error, pod_object

from tessera_operator.labels import Role
from tessera_operator.pods import (
    MAX_MESSAGE_LENGTH,
    TERMINATION_LOG_BYTES,
    LeaseWait,
    failure_line,
    observe_pod,
)

ERROR_TAIL = "\n".join([
    '{"time": 1.0, "progress": "train", "done": 10, "total": 100}',
    '{"time": 2.0, "event": "loading partition"}',
    "tessera train: error: s3://bucket/edges/edges_0_0.h5: not an HDF5 file",
])


def test_a_running_pod() -> None:
    pod = observe_pod(pod_object("demo-trainer-0", run=3))
    assert (pod.name, pod.role, pod.run, pod.phase) == ("demo-trainer-0", Role.TRAINER, 3,
                                                        "Running")
    assert pod.running and pod.active and not pod.finished
    assert (pod.exit_code, pod.reason, pod.message) == (None, None, "")


def test_a_pod_that_failed_on_bad_input() -> None:
    pod = observe_pod(pod_object("demo-trainer-0", phase="Failed", exit_code=65,
                                 message=ERROR_TAIL, reason="Error"))
    assert pod.finished and not pod.active and pod.exit_code == 65
    assert pod.message == "tessera train: error: s3://bucket/edges/edges_0_0.h5: not an HDF5 file"
    assert pod.explanation() == f"demo-trainer-0: Error, exit code 65: {pod.message}"


def test_a_pod_that_found_the_lease_held_says_by_whom_and_until_when() -> None:
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=1)
    tail = f"{ERROR_TAIL}\n{lease_held_error('demo-trainer-0', expires)}"
    waited = observe_pod(pod_object("demo-lock-server", role="lock-server", phase="Failed",
                                    exit_code=75, message=tail))
    assert waited.lease_wait == LeaseWait("demo-trainer-0", expires)
    assert "in use by tessera train (pid 7 on host demo-trainer-0)" in waited.message
    other = observe_pod(pod_object("demo-trainer-0", phase="Failed", exit_code=75,
                                   message=ERROR_TAIL))
    assert other.lease_wait is None


def test_an_oom_killed_pod_and_an_evicted_one() -> None:
    oom = observe_pod(pod_object("demo-trainer-0", phase="Failed", exit_code=137,
                                 reason="OOMKilled"))
    assert oom.explanation() == "demo-trainer-0: OOMKilled, exit code 137"
    evicted = pod_object("demo-trainer-0", phase="Failed", reason="Evicted")
    evicted["status"]["message"] = "The node was low on resource: memory."
    evicted["status"]["containerStatuses"] = []
    pod = observe_pod(evicted)
    assert (pod.reason, pod.exit_code) == ("Evicted", None)
    assert pod.explanation() == "demo-trainer-0: Evicted: The node was low on resource: memory."


def test_pending_pods_say_what_they_wait_for() -> None:
    pulling = observe_pod(pod_object("demo-trainer-0", phase="Pending", waiting=(
        "ImagePullBackOff", 'Back-off pulling image "tessera:9"')))
    assert pulling.explanation() == \
        'demo-trainer-0: ImagePullBackOff: Back-off pulling image "tessera:9"'
    unschedulable = pod_object("demo-trainer-0", phase="Pending")
    unschedulable["status"]["containerStatuses"] = []
    unschedulable["status"]["conditions"] = [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory."}]
    assert observe_pod(unschedulable).explanation() == (
        "demo-trainer-0: Unschedulable: 0/3 nodes are available: 3 Insufficient memory.")


def test_deleting_pods_and_unlabelled_pods() -> None:
    deleting = observe_pod(pod_object("demo-trainer-0", deleting=True))
    assert deleting.deleting and not deleting.running and not deleting.active
    bare = observe_pod({"metadata": {"name": "stranger"}})
    assert (bare.role, bare.run, bare.phase) == (None, 0, "Pending")


def test_credentials_in_a_termination_message_are_redacted() -> None:
    tail = ("botocore error: https://bucket.s3.amazonaws.com/x?X-Amz-Credential=AKIAABCDEFGHIJKLMNOP"
            "%2F20250301&X-Amz-Signature=0123abcdef aws_secret_access_key=wJalrXUtnFEMI/K7MDENG")
    pod = observe_pod(pod_object("demo-trainer-0", phase="Failed", exit_code=75, message=tail))
    for secret in ("AKIAABCDEFGHIJKLMNOP", "0123abcdef", "wJalrXUtnFEMI"):
        assert secret not in pod.message
    assert "botocore error" in pod.message


def test_long_messages_are_bounded() -> None:
    pod = observe_pod(pod_object("demo-trainer-0", phase="Failed", exit_code=1,
                                 message="tessera train: error: " + "x" * 1000))
    assert len(pod.message) == MAX_MESSAGE_LENGTH and pod.message.endswith("...")


@pytest.mark.parametrize(("tail", "line"), [
    (ERROR_TAIL, "tessera train: error: s3://bucket/edges/edges_0_0.h5: not an HDF5 file"),
    ("Traceback (most recent call last):\n  File x\nValueError: boom\n", "ValueError: boom"),
    ('{"event": "retrying storage", "error": "503 Slow Down"}\n{"event": "worker died"}\n',
     "retrying storage: 503 Slow Down"),
    ('{"progress": "train"}\n', ""),
    ('{"event": "checkpoint committed", "commit_seconds": 0.191}\n', ""),
    ("tessera train: terminated (SIGTERM)\n", "tessera train: terminated (SIGTERM)"),
    ("", ""),
])
def test_failure_line(tail: str, line: str) -> None:
    assert failure_line(tail) == line


def _cut_tail(*lines: str) -> str:
    """The kubelet's 2 KB termination message of a log ending with `lines`: the end of a log
    of progress records, begun mid-record."""
    log = "\n".join([*([COMMIT] * 40), *lines]) + "\n"
    return log.encode()[-TERMINATION_LOG_BYTES:].decode()


COMMIT = '{"time": 2.0, "event": "checkpoint committed", "checkpoint_version": 100, ' \
    '"commit_seconds": 0.191}'


@pytest.mark.parametrize(("reason", "said"), [
    ("OOMKilled", "OOMKilled, exit code 137"),
    ("Error", "killed (SIGKILL), exit code 137"),
    (None, "killed (SIGKILL), exit code 137"),
])
def test_a_killed_pod_says_reason_and_exit_code_never_a_cut_record(reason: str | None,
                                                                    said: str) -> None:
    tail = _cut_tail()
    assert not tail.startswith("{")  # the first line is a fragment, as the kubelet cuts it
    pod = observe_pod(pod_object("demo-trainer-0", phase="Failed", exit_code=137,
                                 message=tail, reason=reason))
    assert pod.message == ""
    assert pod.explanation() == f"demo-trainer-0: {said}"


def test_a_cut_first_line_is_never_the_failure_line() -> None:
    error = "tessera train: error: s3://bucket/edges/edges_0_0.h5: not an HDF5 file"
    cut = _cut_tail(error)
    assert failure_line(cut) == error
    fragment = cut.splitlines()[0]
    assert failure_line(fragment + "error: half a line\n" + cut[len(fragment) + 1:]) == error
    assert failure_line("x" * TERMINATION_LOG_BYTES + " error: cut\n" + COMMIT) == ""
