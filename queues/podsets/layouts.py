"""Where each integrated job kind keeps its pod templates, and how many pods each one runs.

Every kind Kueue integrates is one ``Kind`` here: its API version and kind, the field that
suspends it, and its *layout*, the shape of its spec. One reader per layout yields the kind's
pod sets in Kueue's order and with Kueue's names (``queues.podsets.jobs.read_job`` turns them into pod
sets with requests):

- ``job`` (batch/v1 Job): one pod set ``main`` of min(parallelism, completions) pods;
- ``jobset`` (JobSet): one pod set per replicated job, of replicas x pods per Job;
- ``replicas`` (Kubeflow PyTorchJob, TFJob, MPIJob, JAXJob, XGBoostJob, PaddleJob): one pod set
  per replica type, named by the lowercased type, in the kind's order (master before worker);
- ``ray`` (RayCluster, RayJob, RayService: its ``rayClusterConfig``): ``head`` (one pod), one pod
  set per worker group (named by its
  lowercased ``groupName``, replicas x numOfHosts pods) and, for a RayJob submitted as a
  Kubernetes Job (KubeRay's default ``K8sJobMode``), ``submitter``: its
  ``submitterPodTemplate``, or KubeRay's default submitter pod when it sets none;
- ``trainjob`` (Kubeflow Trainer's TrainJob): the JobSet its runtime builds (``queues.podsets.trainjobs``),
  read as a JobSet; the templates are the runtime's, so none is the TrainJob's to write to;
- ``spark`` (the Spark operator's SparkApplication): ``driver`` (1) and ``executor``
  (``spec.executor.instances``), pods built from its Spark pod specs (``queues.podsets.sparkapps``);
  the directives are written into those specs (``SPARK``), not into a pod template;
- ``appwrapper`` (CodeFlare's AppWrapper): its components' pod sets, named ``<appwrapper>-<k>``
  (``queues.podsets.appwrappers``); none is the AppWrapper's to write to (its ``podSetInfos`` are).

A reader reports each problem at its field path (``spec.workerGroupSpecs[1].groupName``) and
goes on, so a user sees every mistake at once. A template's path is None when the kind's
operator makes the pod from defaults (RayJob's default submitter): nothing can be written there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from queues.errors import FieldError
from queues.podsets import appwrappers, kuberay, markings, sparkapps, trainjobs

MAX_POD_SETS = 8  # Kueue's Workload holds at most 8 pod sets (spec.podSets maxItems)


@dataclass(frozen=True, slots=True)
class Directives:
    """Where, under a pod set's pointer (``JobInfo.template_paths``), a kind keeps what a pod's
    scheduling reads and Turnstile writes: a pod template's fields, by default. ``shared_selector``:
    a job-wide node selector the kind's operator adds to every pod (read into each pod set's, and
    removed once Turnstile writes the pod sets' own); ``gates`` None: no scheduling gate can be
    written, so a pod set placed by topology is not pinned (docs/topology.md)."""

    node_selector: str = "/spec/nodeSelector"
    tolerations: str = "/spec/tolerations"
    annotations: str = "/metadata/annotations"
    gates: str | None = "/spec/schedulingGates"
    shared_selector: str | None = None
    pod_spec: str = ".spec"  # the pod spec's field path under the pod set's, in errors

    @property
    def annotations_holder(self) -> str:
        """The object holding the annotations map (a template's metadata)."""
        return self.annotations.rpartition("/")[0]


POD_TEMPLATE = Directives()
# a SparkApplication's role (``spec.driver``, ``spec.executor``): Kueue's RunWithPodSetsInfo writes there
SPARK = Directives(
    "/nodeSelector", "/tolerations", "/annotations", gates=None, shared_selector="/spec/nodeSelector",
    pod_spec=".template.spec",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Kind:
    """An integrated job kind: where its pod sets are and which field suspends it."""

    api_version: str
    kind: str
    suspend_path: tuple[str, ...]
    replica_field: str | None = None  # Kubeflow: the map of replica specs
    replica_order: tuple[str, ...] = ()
    layout: str = "replicas"
    directives: Directives = POD_TEMPLATE

    @property
    def framework(self) -> str:
        """Kueue's name for the integration: ``batch/job``, ``ray.io/rayjob``."""
        return f"{self.api_version.rpartition('/')[0]}/{self.kind.lower()}"


def _kubeflow(api_version: str, kind: str, field: str, order: tuple[str, ...]) -> Kind:
    return Kind(api_version, kind, ("spec", "runPolicy", "suspend"), field, order)


KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k
    for k in (
        Kind("batch/v1", "Job", ("spec", "suspend"), layout="job"),
        _kubeflow("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker")),
        _kubeflow("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator")),
        _kubeflow("kubeflow.org/v2beta1", "MPIJob", "mpiReplicaSpecs", ("Launcher", "Worker")),
        _kubeflow("kubeflow.org/v1", "JAXJob", "jaxReplicaSpecs", ("Worker",)),
        _kubeflow("kubeflow.org/v1", "XGBoostJob", "xgbReplicaSpecs", ("Master", "Worker")),
        _kubeflow("kubeflow.org/v1", "PaddleJob", "paddleReplicaSpecs", ("Master", "Worker")),
        Kind("jobset.x-k8s.io/v1alpha2", "JobSet", ("spec", "suspend"), layout="jobset"),
        Kind("ray.io/v1", "RayJob", ("spec", "suspend"), layout="ray"),
        Kind("ray.io/v1", "RayService", ("spec", "rayClusterConfig", "suspend"), layout="ray"),
        Kind("ray.io/v1", "RayCluster", ("spec", "suspend"), layout="ray"),
        Kind("trainer.kubeflow.org/v1alpha1", "TrainJob", ("spec", "suspend"), layout="trainjob"),
        Kind(sparkapps.API_VERSION, "SparkApplication", ("spec", "suspend"), layout="spark", directives=SPARK),
        Kind(appwrappers.API_VERSION, appwrappers.KIND, ("spec", "suspend"), layout="appwrapper"),
    )
}

# A plain Pod read as a job of one pod set ``main`` (``queues.podsets.pods``): not in ``KINDS``, since a pod
# is held by a scheduling gate, not a suspend field, and the pods of integrated jobs are not queued.
POD = Kind("v1", "Pod", (), layout="pod")

# (pod set name, pod count, pod template, the template's field path or None)
Found = tuple[str, int, Mapping[str, Any], str | None]


def int_field(spec: Mapping[str, Any], key: str, path: str, default: int, problems: list[FieldError]) -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(FieldError(f"{path}.{key}", f"must be a whole number >= 0, not {value!r}"))
        return 0
    return value


def batch_pods_count(job_spec: Mapping[str, Any], path: str, problems: list[FieldError]) -> int:
    """Pods a batch Job runs at once: parallelism (default 1), capped by completions."""
    count = int_field(job_spec, "parallelism", path, 1, problems)
    if job_spec.get("completions") is not None:
        count = min(count, int_field(job_spec, "completions", path, 1, problems))
    return count


def template(holder: Any, path: str, problems: list[FieldError], key: str = "template") -> Mapping[str, Any] | None:
    """The pod template (metadata and spec) under ``holder.<key>``."""
    found = holder.get(key) if isinstance(holder, Mapping) else None
    if not isinstance(found, Mapping) or not isinstance(found.get("spec"), Mapping):
        problems.append(FieldError(f"{path}.{key}.spec", "required: the pod template's spec"))
        return None
    return found


def templates(
    kind: Kind,
    obj: Mapping[str, Any],
    problems: list[FieldError],
    runtimes: trainjobs.Runtimes | None = None,
    *,
    patched: bool = False,
) -> Iterator[Found]:
    """Every pod set of job ``obj`` of ``kind``, in Kueue's order. A TrainJob is read through its
    runtime (``runtimes`` finds it), with Turnstile's runtime patch applied when ``patched`` (the
    pods its operator makes) or not (the job's own pod sets)."""
    spec = obj.get("spec") or {}
    if kind.layout == "appwrapper":
        yield from _appwrapper(obj, problems)
        return
    if kind.layout == "ray":
        made = kuberay.made_cluster(kind.kind, obj, runtimes)
        yield from _ray(kind, spec, problems, elastic=markings.elastic(obj), made=made)
        return
    if kind.layout != "trainjob":
        yield from _READERS[kind.layout](kind, spec, problems)
        return
    resolved = trainjobs.resolve(obj, runtimes, problems)
    if not resolved:
        return
    if patched:
        resolved = trainjobs.apply_patches(resolved, obj)
    ref = trainjobs.runtime_ref(obj)
    inner: list[FieldError] = []
    for name, count, found, _ in _jobset(kind, resolved, inner):
        yield name, count, found, None
    where = f"spec.runtimeRef ({ref[0]} {ref[2]}): spec.template" if ref else "spec.runtimeRef"
    problems.extend(e.under(where) for e in inner)


def _job(kind: Kind, spec: Mapping[str, Any], problems: list[FieldError]) -> Iterator[Found]:
    found = template(spec, "spec", problems)
    if found is not None:
        yield "main", batch_pods_count(spec, "spec", problems), found, "spec.template"


def _jobset(kind: Kind, spec: Mapping[str, Any], problems: list[FieldError]) -> Iterator[Found]:
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        problems.append(FieldError("spec.replicatedJobs", "required: a list of replicated jobs"))
        return
    for i, rj in enumerate(replicated):
        path = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, Mapping) or not isinstance(rj.get("name"), str):
            problems.append(FieldError(f"{path}.name", "required: the replicated job's name"))
            continue
        replicas = int_field(rj, "replicas", path, 1, problems)
        job_spec = (rj.get("template") or {}).get("spec") if isinstance(rj.get("template"), Mapping) else None
        if not isinstance(job_spec, Mapping):
            problems.append(FieldError(f"{path}.template.spec", "required: the Job template's spec"))
            continue
        found = template(job_spec, f"{path}.template.spec", problems)
        if found is not None:
            count = replicas * batch_pods_count(job_spec, f"{path}.template.spec", problems)
            yield str(rj["name"]), count, found, f"{path}.template.spec.template"


def _replicas(kind: Kind, spec: Mapping[str, Any], problems: list[FieldError]) -> Iterator[Found]:
    assert kind.replica_field is not None
    replica_specs = spec.get(kind.replica_field)
    if not isinstance(replica_specs, Mapping) or not replica_specs:
        problems.append(FieldError(f"spec.{kind.replica_field}", "required: the replica specs"))
        return
    for rtype in replica_specs:
        if rtype not in kind.replica_order:
            problems.append(
                FieldError(
                    f"spec.{kind.replica_field}.{rtype}",
                    f"unknown replica type; {kind.kind} has {', '.join(kind.replica_order)}",
                )
            )
    for rtype in kind.replica_order:
        if rtype not in replica_specs:
            continue
        path = f"spec.{kind.replica_field}.{rtype}"
        rspec = replica_specs[rtype]
        if not isinstance(rspec, Mapping):
            problems.append(FieldError(path, "must be a replica spec"))
            continue
        found = template(rspec, path, problems)
        if found is not None:
            yield rtype.lower(), int_field(rspec, "replicas", path, 1, problems), found, f"{path}.template"


def _ray(
    kind: Kind,
    spec: Mapping[str, Any],
    problems: list[FieldError],
    *,
    elastic: bool = False,
    made: Mapping[str, Any] | None = None,
) -> Iterator[Found]:
    """A RayCluster's spec, a RayService's ``rayClusterConfig``, or a RayJob's ``rayClusterSpec`` plus
    its submitter (see the docstring).
    As Kueue's webhook: a queued Ray cluster may autoscale only when ``elastic``
    (``kueue.x-k8s.io/elastic-job``: resized in place, ``queues.cycle.elastic``), its head then
    charged for the autoscaler sidecar KubeRay adds to it; ``made``: the RayCluster KubeRay made for
    an autoscaling RayJob or RayService, whose worker replicas count (``kuberay.made_cluster``). A
    RayJob must delete its cluster when it finishes and may not run on an existing one."""
    job = kind.kind == "RayJob"
    held = kuberay.CLUSTER_SPEC.get(kind.kind)
    base = f"spec.{held}" if held else "spec"
    if job:
        if spec.get("clusterSelector"):
            problems.append(
                FieldError("spec.clusterSelector", "a queued RayJob cannot run on an existing RayCluster; remove it")
            )
        if spec.get("shutdownAfterJobFinishes") is not True:
            problems.append(
                FieldError(
                    "spec.shutdownAfterJobFinishes",
                    "must be true for a queued RayJob: its cluster must go when the job finishes, or it would hold "
                    "its quota forever",
                )
            )
    cluster = spec.get(held) if held else spec
    if not isinstance(cluster, Mapping):
        problems.append(FieldError(base, "required: the Ray cluster's spec"))
        return
    autoscales = cluster.get("enableInTreeAutoscaling") is True
    if autoscales and not elastic:
        problems.append(
            FieldError(
                f"{base}.enableInTreeAutoscaling",
                "a queued Ray cluster can autoscale only as an elastic job (annotate it "
                f'{markings.ELASTIC_JOB}: "true"); else set it to false',
            )
        )
    head = template(cluster.get("headGroupSpec"), f"{base}.headGroupSpec", problems)
    if head is not None:
        if autoscales and elastic:
            head = kuberay.with_autoscaler(head, cluster.get("autoscalerOptions"))
        yield "head", 1, head, f"{base}.headGroupSpec.template"
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        problems.append(FieldError(f"{base}.workerGroupSpecs", "must be a list of worker groups"))
        groups = []
    names: set[str] = {"head", "submitter"} if job else {"head"}
    for i, group in enumerate(groups):
        path = f"{base}.workerGroupSpecs[{i}]"
        name = group.get("groupName") if isinstance(group, Mapping) else None
        if not isinstance(name, str) or not name:
            problems.append(FieldError(f"{path}.groupName", "required: the worker group's name"))
            continue
        if name.lower() in names:
            problems.append(FieldError(f"{path}.groupName", f"{name!r} names another pod set of this job; rename it"))
            continue
        names.add(name.lower())
        replicas = int_field(group, "replicas", path, 1, problems)
        if made is not None:
            replicas = kuberay.made_replicas(made, str(name), replicas)
        hosts = int_field(group, "numOfHosts", path, 1, problems)
        found = template(group, path, problems)
        if found is not None:
            yield name.lower(), replicas * max(1, hosts), found, f"{path}.template"
    if job and spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
        if spec.get("submitterPodTemplate") is None:
            yield "submitter", 1, kuberay.DEFAULT_SUBMITTER, None
        else:
            submitter = template(spec, "spec", problems, key="submitterPodTemplate")
            if submitter is not None:
                yield "submitter", 1, submitter, "spec.submitterPodTemplate"


def _spark(kind: Kind, spec: Mapping[str, Any], problems: list[FieldError]) -> Iterator[Found]:
    yield from sparkapps.templates(spec, problems)


def _appwrapper(obj: Mapping[str, Any], problems: list[FieldError]) -> Iterator[Found]:
    """An AppWrapper's components' pod sets, named ``<appwrapper>-<k>`` (``queues.podsets.appwrappers``);
    their templates are written by the AppWrapper controller, from ``podSetInfos``, not by Turnstile."""
    for name, ps in _named_component_pod_sets(obj, problems):
        yield name, ps.count, ps.template, None


def appwrapper_pod_sets(obj: Mapping[str, Any]) -> list[tuple[str, appwrappers.ComponentPodSet]]:
    """An AppWrapper's pod sets by name, with the component each is in (empty if it cannot be read)."""
    problems: list[FieldError] = []
    found = list(_named_component_pod_sets(obj, problems))
    return [] if problems else found


def _named_component_pod_sets(
    obj: Mapping[str, Any], problems: list[FieldError]
) -> Iterator[tuple[str, appwrappers.ComponentPodSet]]:
    name = str((obj.get("metadata") or {}).get("name") or "")
    found = appwrappers.component_pod_sets(obj.get("spec") or {}, problems, component_pod_sets)
    for k, ps in enumerate(found):
        yield appwrappers.pod_set_name(name, k), ps


_WORKLOADS = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}


def component_pod_sets(
    obj: Mapping[str, Any], problems: list[FieldError]
) -> list[tuple[int, Mapping[str, Any], str | None]] | None:
    """A wrapped object's pod sets (count, template, its field path), where its kind says them: an
    integrated job kind (not a TrainJob, whose runtime an AppWrapper does not carry, nor another
    AppWrapper), a Deployment's or StatefulSet's ``replicas`` pods, a Pod; None for another kind."""
    api_kind = (str(obj.get("apiVersion")), str(obj.get("kind")))
    kind = KINDS.get(api_kind)
    if kind is not None and kind.layout not in ("trainjob", "appwrapper"):
        return [(count, found, path) for _, count, found, path in templates(kind, obj, problems)]
    spec = obj.get("spec")
    if api_kind in _WORKLOADS:
        found = template(spec, "spec", problems)
        replicas = int_field(spec if isinstance(spec, Mapping) else {}, "replicas", "spec", 1, problems)
        return [(replicas, found, "spec.template")] if found is not None else []
    if api_kind == ("v1", "Pod"):
        if isinstance(spec, Mapping):
            return [(1, obj, "")]
        problems.append(FieldError("spec", "required: the pod's spec"))
        return []
    return None


_READERS = {"job": _job, "jobset": _jobset, "replicas": _replicas, "ray": _ray, "spark": _spark}
