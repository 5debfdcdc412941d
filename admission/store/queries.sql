-- The SQL the store writes by hand, by name (``admission.store.queries`` reads this file).
--
-- Everything else the store says goes through SQLAlchemy Core (``select``/``insert`` over
-- ``admission.store.tables``). What is here is here because Core would say it worse: batched writes
-- over column arrays (``unnest``: the cost is the rows, not the bind parameters), window functions,
-- advisory locks, the lease's compare-and-set.
--
-- Each entry is a comment header, then the statement:
--   -- name: <name>          a statement (``queries.query(name)``)
--   -- fragment: <name>      an expression several statements share, written {<name>} in them
--   -- template: <name>      text one builder formats itself (``queries.template(name)``)
--   -- locks: ...            what it locks and why that is safe (every statement says it)
-- Names are module_what; every name here is used by exactly one store module.
--
-- Who writes: the leader writes workloads, admissions, the ledger and events only inside its
-- fenced step transaction (``lease.check`` runs first in it and locks the lease row
-- in share mode), so a deposed leader's writes fail as a whole. Admin edits take the configuration
-- lock. Reads take no locks (MVCC snapshots).


-- fragment: object_name
-- A workload's Workload object name as Kueue names them: <kind>-<job name>-<first 5 of its job's
-- uid> (``workload_objects.object_name`` is the same rule in Python).
lower(w.kind) || '-' || w.name || '-' || left(w.job_uid, 5)

-- fragment: workload_columns
-- What a Workload object is rendered from (``workload_shape.to_object``); ``active`` as a person
-- last asked it; ``ran_since``: a finished workload that was admitted when it finished, since when.
w.id, w.job_uid, w.api_version, w.kind, w.namespace, w.name, w.local_queue, w.cluster_queue,
w.priority, w.pod_sets, w.state, w.reason, w.message, w.created_at, w.admitted_at, w.finished_at,
w.assigned_flavors, w.checks, w.labels, w.executed_seconds, w.retries, w.requeue_at, w.pods_ready_at,
COALESCE((SELECT r.active FROM activity_requests r WHERE r.workload_id = w.id), w.active) AS active,
CASE WHEN w.state = 'Finished' AND w.assigned_flavors IS NOT NULL THEN
  (SELECT e.at FROM workload_events e WHERE e.workload_id = w.id AND e.type = 'Admitted' ORDER BY e.id DESC LIMIT 1)
END AS ran_since,
{object_name} AS object_name

-- fragment: workload_visible
-- Shown as an object: unfinished, or finished within the retention (:retention seconds).
(w.state <> 'Finished' OR w.finished_at > now() - make_interval(secs => :retention))


-- ---------------------------------------------------------------- the database itself

-- name: database_has_revisions
-- locks: none (a read of the catalog).
SELECT to_regclass('alembic_version') IS NOT NULL;

-- name: database_revision
-- locks: none (a read).
SELECT version_num FROM alembic_version;

-- template: database_exists
-- locks: none (a read of the catalog; through psql, for the embedded server).
SELECT 1 FROM pg_database WHERE datname = '{name}'

-- template: database_create
-- locks: none. The embedded server's database, or a scratch one ({name}: the settings' name or a
-- generated one, never a request's text; identifiers cannot be bound); outside any transaction.
CREATE DATABASE "{name}"

-- template: database_drop
-- locks: the database, ending its connections (FORCE).
DROP DATABASE IF EXISTS "{name}" WITH (FORCE)

-- name: transaction_work_mem
-- locks: none. Room to hash large groupings instead of sorting on disk, for this transaction only
-- (set_config's third argument: SET LOCAL, with a bind parameter).
SELECT set_config('work_mem', :size, true);

-- name: notify
-- locks: none; delivered to listeners when the transaction commits, never if it rolls back.
SELECT pg_notify(:channel, :payload);


-- ---------------------------------------------------------------- configuration

-- name: config_lock
-- locks: advisory transaction lock :key (``config.CONFIG_LOCK``) until commit: admin edits of the
-- configuration are serialized, so each validates against the configuration it replaces.
SELECT pg_advisory_xact_lock(:key);


-- ---------------------------------------------------------------- leadership (the lease)

-- name: lease_lock_timeout
-- locks: none. How long this transaction waits for a lock (the lease row) before it gives up,
-- in milliseconds, for this transaction only.
SELECT set_config('lock_timeout', :millis, true);

-- name: lease_acquire
-- locks: the lease row (insert or update), until commit. Compare-and-set: the holder renews, or
-- anyone takes an expired lease with the next fencing token; the database's clock decides.
INSERT INTO leader_lease (name, holder, fencing_token, renewed_at, expires_at)
VALUES (:name, :holder, 1, clock_timestamp(), clock_timestamp() + :ttl)
ON CONFLICT (name) DO UPDATE SET
  fencing_token = CASE WHEN leader_lease.holder = EXCLUDED.holder
                       THEN leader_lease.fencing_token ELSE leader_lease.fencing_token + 1 END,
  holder = EXCLUDED.holder, renewed_at = clock_timestamp(), expires_at = EXCLUDED.expires_at
WHERE leader_lease.holder = EXCLUDED.holder OR leader_lease.expires_at < clock_timestamp()
RETURNING fencing_token;

-- name: lease_release
-- locks: the lease row, until commit; only the holder with this token releases it.
UPDATE leader_lease SET expires_at = clock_timestamp() - interval '1 millisecond'
WHERE name = :n AND holder = :h AND fencing_token = :t;


-- ---------------------------------------------------------------- workloads: intake

-- name: intake_upsert
-- locks: the rows of these jobs (new or pending), in the leader's fenced step. Idempotent by job
-- uid; an admitted or finished row is left as it is (the WHERE) and not returned.
INSERT INTO workloads (job_uid, api_version, kind, namespace, name, local_queue, priority, pod_sets, labels,
                       state, queue_ts, created_at)
SELECT u.job_uid, u.api_version, u.kind, u.namespace, u.name, u.local_queue, u.priority, u.pod_sets::jsonb,
       u.labels::jsonb, 'Pending', u.ts, u.ts
FROM unnest(CAST(:job_uid AS text[]), CAST(:api_version AS text[]), CAST(:kind AS text[]),
            CAST(:namespace AS text[]), CAST(:name AS text[]), CAST(:local_queue AS text[]),
            CAST(:priority AS integer[]), CAST(:pod_sets AS text[]), CAST(:labels AS text[]),
            CAST(:ts AS timestamptz[])) WITH ORDINALITY
     AS u(job_uid, api_version, kind, namespace, name, local_queue, priority, pod_sets, labels, ts, n)
ORDER BY u.n  -- ids follow the records' order: the order jobs were seen is the order they queue
ON CONFLICT (job_uid) DO UPDATE SET
    local_queue = EXCLUDED.local_queue, priority = EXCLUDED.priority,
    labels = EXCLUDED.labels, pod_sets = EXCLUDED.pod_sets
WHERE workloads.state = 'Pending'
RETURNING id, job_uid, state;


-- ---------------------------------------------------------------- workloads: the quota commit

-- name: commit_lock_trees
-- locks: one advisory transaction lock per quota tree (cohort root), until commit, taken in sorted
-- order so two writers never wait on each other in a circle; a quota re-check after it sees every
-- admission another transaction committed in those trees.
SELECT count(pg_advisory_xact_lock(hashtext(k)))
FROM (SELECT unnest(CAST(:keys AS text[])) AS k ORDER BY 1) AS ordered;

-- name: commit_executed
-- locks: these workloads' rows (the fenced step). What an evicted job ran so far.
UPDATE workloads AS w SET executed_seconds = u.s
FROM unnest(CAST(:id AS bigint[]), CAST(:s AS float8[])) AS u(id, s)
WHERE w.id = u.id;

-- name: commit_admit
-- locks: these workloads' rows (the fenced step, under their trees' locks).
UPDATE workloads AS w
SET state = 'Admitted', cluster_queue = u.cluster_queue, admitted_at = :now,
    reason = CASE WHEN u.checks::jsonb = '[]'::jsonb THEN 'Admitted' ELSE 'WaitingForCapacity' END,
    message = NULL, assigned_flavors = u.flavors::jsonb, checks = u.checks::jsonb
FROM unnest(CAST(:id AS bigint[]), CAST(:cluster_queue AS text[]), CAST(:flavors AS text[]),
            CAST(:checks AS text[]))
     AS u(id, cluster_queue, flavors, checks)
WHERE w.id = u.id;

-- name: commit_insert_admissions
-- locks: new rows only (the fenced step, under their trees' locks).
INSERT INTO admissions (workload_id, flavor, resource, cluster_queue, quantity)
SELECT * FROM unnest(CAST(:workload_id AS bigint[]), CAST(:flavor AS text[]), CAST(:resource AS text[]),
                     CAST(:cluster_queue AS text[]), CAST(:quantity AS numeric[]));

-- name: commit_insert_ledger
-- locks: new rows only (the fenced step): the ledger's open intervals of what was admitted.
INSERT INTO usage_ledger (workload_id, workload, namespace, cluster_queue, local_queue, flavor, resource,
                          quantity, labels, started_at)
SELECT u.*, :now FROM unnest(CAST(:workload_id AS bigint[]), CAST(:workload AS text[]),
                             CAST(:namespace AS text[]), CAST(:cluster_queue AS text[]),
                             CAST(:local_queue AS text[]), CAST(:flavor AS text[]), CAST(:resource AS text[]),
                             CAST(:quantity AS numeric[]), CAST(:labels AS text[])::jsonb[]) AS u;

-- name: commit_insert_events
-- locks: new rows only (the fenced step): the workloads' history.
INSERT INTO workload_events (workload_id, type, cluster_queue, flavors, borrowing, counts, reason, detail,
                             by_workload, placement, at)
SELECT u.*, :now FROM unnest(CAST(:workload_id AS bigint[]), CAST(:type AS text[]),
                             CAST(:cluster_queue AS text[]), CAST(:flavors AS text[])::jsonb[],
                             CAST(:borrowing AS boolean[]), CAST(:counts AS text[])::jsonb[],
                             CAST(:reason AS text[]), CAST(:detail AS text[]), CAST(:by_workload AS text[]),
                             CAST(:placement AS text[])::jsonb[]) AS u;


-- ---------------------------------------------------------------- workloads: what is learned between decisions

-- name: state_set_reasons
-- locks: these pending workloads' rows (the fenced step); an admitted one is left alone.
UPDATE workloads AS w SET reason = u.reason, message = u.message, cluster_queue = u.cluster_queue
FROM unnest(CAST(:id AS bigint[]), CAST(:reason AS text[]), CAST(:message AS text[]),
            CAST(:cluster_queue AS text[])) AS u(id, reason, message, cluster_queue)
WHERE w.id = u.id AND w.state = 'Pending';

-- name: state_set_checks
-- locks: these workloads' rows (the fenced step).
UPDATE workloads AS w
SET checks = u.checks::jsonb, retries = u.retries, requeue_at = u.requeue_at, active = u.active,
    reason = u.reason, message = u.message
FROM unnest(CAST(:id AS bigint[]), CAST(:checks AS text[]), CAST(:retries AS integer[]),
            CAST(:requeue_at AS timestamptz[]), CAST(:active AS boolean[]), CAST(:reason AS text[]),
            CAST(:message AS text[])) AS u(id, checks, retries, requeue_at, active, reason, message)
WHERE w.id = u.id;

-- name: state_started_events
-- locks: new rows only (the fenced step): Admitted events of workloads whose last check passed.
INSERT INTO workload_events (workload_id, type, cluster_queue, flavors, borrowing, counts, placement, at)
SELECT w.id, 'Admitted', w.cluster_queue, w.assigned_flavors -> 'flavors',
       (w.assigned_flavors ->> 'borrowing')::boolean, w.assigned_flavors -> 'counts',
       w.assigned_flavors -> 'placement', :now
FROM workloads AS w
WHERE w.id = ANY(CAST(:id AS bigint[])) AND w.state = 'Admitted';

-- name: state_set_pods_ready
-- locks: these admitted workloads' rows (the fenced step).
UPDATE workloads AS w SET pods_ready_at = u.at
FROM unnest(CAST(:id AS bigint[]), CAST(:at AS timestamptz[])) AS u(id, at)
WHERE w.id = u.id AND w.state = 'Admitted';

-- name: state_set_admitted_reasons
-- locks: these admitted workloads' rows (the fenced step).
UPDATE workloads AS w SET reason = u.reason, message = u.message
FROM unnest(CAST(:id AS bigint[]), CAST(:reason AS text[]), CAST(:message AS text[])) AS u(id, reason, message)
WHERE w.id = u.id AND w.state = 'Admitted';

-- name: state_clear_admitted_reason
-- locks: the admitted rows still giving :reason (the fenced step).
UPDATE workloads SET reason = NULL, message = NULL
WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'Admitted' AND reason = :reason;


-- ---------------------------------------------------------------- workloads: stop and resume (spec.active)

-- name: activity_find
-- locks: none (a read in the admin's transaction; the request it writes is an upsert).
SELECT w.id, w.namespace, w.state, w.active, {object_name} AS object_name, r.active AS requested
FROM workloads AS w LEFT JOIN activity_requests AS r ON r.workload_id = w.id
WHERE w.namespace = :namespace AND (w.name = :name OR {object_name} = :name)
ORDER BY w.state = 'Finished', w.id DESC;

-- name: activity_pending
-- locks: none (the leader's read, in its step).
SELECT r.workload_id, w.job_uid, r.active, r.actor, r.requested_at
FROM activity_requests AS r JOIN workloads AS w ON w.id = r.workload_id
ORDER BY r.requested_at, r.workload_id;

-- name: activity_take
-- locks: the requests applied (the fenced step); one asked again meanwhile has a newer
-- requested_at and stays for the next step.
DELETE FROM activity_requests AS r
USING unnest(CAST(:id AS bigint[]), CAST(:at AS timestamptz[])) AS t(id, at)
WHERE r.workload_id = t.id AND r.requested_at = t.at;


-- ---------------------------------------------------------------- the ledger: running and measured hours

-- name: usage_set_running
-- locks: the open ledger rows of these workloads (the leader's fenced record transaction).
UPDATE usage_ledger AS l SET running_at = GREATEST(u.at, l.started_at)
FROM unnest(CAST(:id AS bigint[]), CAST(:at AS timestamptz[])) AS u(id, at)
WHERE l.workload_id = u.id AND l.ended_at IS NULL AND l.running_at IS NULL;

-- name: usage_set_run_measured
-- locks: the closed ledger rows of these workloads within each window (the fenced record
-- transaction): a finished run's measurement, read once after it ended.
UPDATE usage_ledger AS l
SET measured_seconds = CASE WHEN u.mean IS NULL THEN l.measured_seconds
                            ELSE EXTRACT(EPOCH FROM l.ended_at - l.running_at) END,
    busy_seconds = CASE WHEN u.mean IS NULL THEN l.busy_seconds
                        ELSE EXTRACT(EPOCH FROM l.ended_at - l.running_at) * u.mean END,
    memory_seconds = CASE WHEN u.mib IS NULL THEN l.memory_seconds
                          ELSE EXTRACT(EPOCH FROM l.ended_at - l.running_at) END,
    memory_mib_seconds = CASE WHEN u.mib IS NULL THEN l.memory_mib_seconds
                              ELSE EXTRACT(EPOCH FROM l.ended_at - l.running_at) * u.mib END,
    memory_peak_mib = GREATEST(l.memory_peak_mib, u.peak),
    memory_total_mib = GREATEST(l.memory_total_mib, u.total)
FROM unnest(CAST(:id AS bigint[]), CAST(:since AS timestamptz[]), CAST(:until AS timestamptz[]),
            CAST(:mean AS float8[]), CAST(:peak AS float8[]), CAST(:mib AS float8[]),
            CAST(:total AS float8[])) AS u(id, since, until, mean, peak, mib, total)
WHERE l.workload_id = u.id AND l.ended_at IS NOT NULL AND l.running_at IS NOT NULL
  AND l.ended_at > l.running_at AND l.started_at < u.until AND l.ended_at > u.since;

-- name: usage_add_measured
-- locks: the open, running ledger rows of these workloads (the fenced record transaction).
UPDATE usage_ledger AS l
SET measured_seconds = l.measured_seconds + u.seconds, busy_seconds = l.busy_seconds + u.busy,
    memory_seconds = l.memory_seconds + u.mem_s, memory_mib_seconds = l.memory_mib_seconds + u.mib_s,
    memory_peak_mib = GREATEST(l.memory_peak_mib, u.peak),
    memory_total_mib = GREATEST(l.memory_total_mib, u.total)
FROM unnest(CAST(:id AS bigint[]), CAST(:seconds AS float8[]), CAST(:busy AS float8[]),
            CAST(:mem_s AS float8[]), CAST(:mib_s AS float8[]), CAST(:peak AS float8[]),
            CAST(:total AS float8[])) AS u(id, seconds, busy, mem_s, mib_s, peak, total)
WHERE l.workload_id = u.id AND l.ended_at IS NULL AND l.running_at IS NOT NULL;


-- ---------------------------------------------------------------- read models: the CLI and the dashboard

-- name: read_models_workloads
-- locks: none (a read).
SELECT id, namespace, name, kind, local_queue, cluster_queue,
       {object_name} AS object_name,
       -- holding quota, its job not started yet: admission checks still to pass, or preempted
       -- workloads' pods still stopping
       CASE WHEN state = 'Admitted' AND (checks <> '[]'::jsonb OR reason = 'Preempting') THEN 'QuotaReserved'
            ELSE state END AS state,
       priority, reason, message, pod_sets, assigned_flavors, created_at,
       CASE WHEN state = 'Pending' AND cluster_queue IS NOT NULL THEN
         row_number() OVER (PARTITION BY cluster_queue, state = 'Pending'
                            ORDER BY priority DESC, queue_ts, id) END AS cq_position,
       CASE WHEN state = 'Pending' AND local_queue IS NOT NULL THEN
         row_number() OVER (PARTITION BY namespace, local_queue, state = 'Pending'
                            ORDER BY priority DESC, queue_ts, id) END AS lq_position
FROM workloads w
WHERE state <> 'Finished'
ORDER BY namespace, name;

-- name: read_models_pending
-- locks: none (a read).
SELECT namespace, name, kind, local_queue, priority, reason, message, queue_ts
FROM workloads
WHERE state = 'Pending' AND cluster_queue = :cq
ORDER BY priority DESC, queue_ts, id
LIMIT :limit OFFSET :offset;

-- name: read_models_marks
-- locks: none (a read). What changed since a page last looked: the newest event, audit entry and
-- workload, and how many are unfinished.
SELECT (SELECT coalesce(max(id), 0) FROM workload_events),
       (SELECT coalesce(max(id), 0) FROM audit_log),
       (SELECT count(*) FROM workloads WHERE state <> 'Finished'),
       (SELECT coalesce(max(id), 0) FROM workloads);


-- ---------------------------------------------------------------- read models: Workload objects and visibility

-- name: workload_objects_page
-- locks: none (a read). One page after (:ns, :name, :wid), from the (namespace, name, id) index;
-- LIMIT NULL is every row.
SELECT {workload_columns} FROM workloads w
WHERE {workload_visible} AND (w.namespace, w.name, w.id) > (:ns, :name, :wid)
ORDER BY w.namespace, w.name, w.id
LIMIT :limit;

-- name: workload_objects_page_in_namespace
-- locks: none (a read). ``workload_objects_page`` within namespace :namespace.
SELECT {workload_columns} FROM workloads w
WHERE {workload_visible} AND (w.namespace, w.name, w.id) > (:ns, :name, :wid) AND w.namespace = :namespace
ORDER BY w.namespace, w.name, w.id
LIMIT :limit;

-- name: workload_objects_get
-- locks: none (a read). By object name or job name; the unfinished one, else the latest.
SELECT {workload_columns} FROM workloads w
WHERE {workload_visible} AND w.namespace = :namespace AND ({object_name} = :name OR w.name = :name)
ORDER BY (w.state = 'Finished'), w.id DESC
LIMIT 1;

-- name: workload_objects_by_job_uids
-- locks: none (a read).
SELECT {workload_columns} FROM workloads w
WHERE {workload_visible} AND w.job_uid = ANY(:uids);

-- name: workload_objects_evictions
-- locks: none (a read). Each workload's latest eviction.
SELECT DISTINCT ON (workload_id) workload_id, at, reason, detail, by_workload
FROM workload_events
WHERE type = 'Evicted' AND workload_id = ANY(:ids)
ORDER BY workload_id, id DESC;

-- name: workload_objects_names
-- locks: none (a read). ``namespace/job`` keys -> the latest Workload object of that job name.
SELECT DISTINCT ON (w.namespace, w.name) w.namespace, w.name, {object_name} AS object_name
FROM workloads w JOIN unnest(CAST(:ns AS text[]), CAST(:names AS text[])) AS k(ns, name)
     ON w.namespace = k.ns AND w.name = k.name
ORDER BY w.namespace, w.name, w.id DESC;

-- name: workload_objects_pending
-- locks: none (a read). Kueue's visibility PendingWorkloads of ClusterQueue :cq in queue order,
-- with positions in it and in their LocalQueue (from 0); only LocalQueue :namespace/:lq when
-- :namespace is given.
SELECT * FROM (
    SELECT w.namespace, w.name, w.kind, w.api_version, w.job_uid, w.local_queue, w.priority,
           w.created_at, {object_name} AS object_name,
           row_number() OVER (ORDER BY w.priority DESC, w.queue_ts, w.id) - 1 AS cq_position,
           row_number() OVER (PARTITION BY w.namespace, w.local_queue
                              ORDER BY w.priority DESC, w.queue_ts, w.id) - 1 AS lq_position
    FROM workloads w
    WHERE w.state = 'Pending' AND w.active AND w.cluster_queue = :cq
) ranked
WHERE CAST(:namespace AS text) IS NULL OR (namespace = :namespace AND local_queue = :lq)
ORDER BY cq_position
OFFSET :offset LIMIT :limit;

-- name: workload_objects_local_queue_target
-- locks: none (a read).
SELECT cluster_queue FROM local_queues WHERE namespace = :ns AND name = :name;

-- name: workload_objects_cluster_queue_exists
-- locks: none (a read).
SELECT 1 FROM cluster_queues WHERE name = :name;


-- ---------------------------------------------------------------- right-sizing (``turnstile rightsize``)

-- name: rightsizing_resources
-- locks: none (a read). The resources whose memory was measured within [:lo, :hi].
SELECT DISTINCT resource FROM usage_ledger
WHERE started_at < :hi AND coalesce(ended_at, :hi) > :lo AND memory_peak_mib IS NOT NULL;

-- template: rightsizing_grouped
-- locks: none (a read). Per (group, workload, resource): the card-hours held within [:lo, :hi]
-- and the busiest GPU's peak, size, utilisation and mean memory. {group}: the --by expression;
-- {only}: which workloads.
SELECT {group} AS g, workload, max(cluster_queue) AS cluster_queue, resource,
       sum(quantity::float8 * date_part('epoch', least(coalesce(ended_at, :hi), :hi)
           - greatest(started_at, :lo))) / 3600000.0 AS unit_hours,
       max(memory_peak_mib) AS peak, max(memory_total_mib) AS total,
       sum(busy_seconds) / nullif(sum(measured_seconds), 0) AS busy,
       sum(memory_mib_seconds) / nullif(sum(memory_seconds), 0) AS mean_mib
FROM usage_ledger
WHERE started_at < :hi AND coalesce(ended_at, :hi) > :lo AND memory_peak_mib IS NOT NULL AND {only}
GROUP BY 1, 2, 4

-- template: rightsizing_judged
-- locks: none (a read). One statement, one pass over the ledger. ``a`` aggregates each (group,
-- workload) once, with what each GPU resource's verdict needs side by side ({per_resource}: hours,
-- peak, size, busy, each FILTERed to its resource), so the totals count workloads without a
-- second aggregate over half a million of them; ``j`` (kept in memory) adds the card-hours and
-- what the verdicts save (the ladder's CASE: {card_hours}, {saved}); part 1 names the workloads
-- saving most ({where}), part 2 gives the totals per group and in all (GROUPING SETS; ``whole``
-- marks the grand total).
WITH a AS (
    SELECT {group} AS g, workload, {per_resource}
    FROM (SELECT *, array_position(CAST(:resources AS text[]), resource::text) AS ri FROM usage_ledger
          WHERE started_at < :hi AND coalesce(ended_at, :hi) > :lo AND memory_peak_mib IS NOT NULL
                AND resource = ANY(CAST(:resources AS text[]))) AS l
    GROUP BY 1, 2
), j AS MATERIALIZED (
    SELECT g, workload, {card_hours} AS card_hours, {saved} AS saved FROM a
)
SELECT 1 AS part, 0 AS whole, g, workload, saved, card_hours, NULL::bigint AS n, NULL::bigint AS fitting
FROM (SELECT * FROM j {where} ORDER BY saved DESC, card_hours DESC, workload LIMIT :limit) AS top
UNION ALL
SELECT 2, GROUPING(g), g, NULL, sum(saved), sum(card_hours), count(*), count(*) FILTER (WHERE saved > 0)
FROM j GROUP BY GROUPING SETS ((g), ())

-- template: rightsizing_per_resource
-- locks: none. What resource {i}'s verdict needs, in ``rightsizing_judged``'s ``a`` ({only}: its FILTER).
sum(quantity::float8 * date_part('epoch', least(coalesce(ended_at, :hi), :hi) - greatest(started_at, :lo)))
    {only} / 3600000.0 AS h{i},
max(memory_peak_mib) {only} AS p{i}, max(memory_total_mib) {only} AS t{i},
sum(busy_seconds) {only} / nullif(sum(measured_seconds) {only}, 0) AS b{i}

-- ---------------------------------------------------------------- workloads: elastic jobs resized in place

-- name: resize_close_ledger
-- locks: this workload's open ledger rows (the fenced step, under its tree's lock): its intervals at
-- the old size end now (what the new ones carry on is returned, one row).
UPDATE usage_ledger SET ended_at = :now
WHERE workload_id = :id AND ended_at IS NULL
RETURNING workload, namespace, cluster_queue, local_queue, labels, running_at IS NOT NULL AS running;

-- name: resize_open_ledger
-- locks: new rows only (the fenced step): its intervals at the new size, from now (running from now
-- if its run was seen under the old size).
INSERT INTO usage_ledger (workload_id, workload, namespace, cluster_queue, local_queue, flavor, resource,
                          quantity, labels, started_at, running_at)
SELECT :id, :workload, :namespace, :cluster_queue, :local_queue, n.flavor, n.resource, n.quantity,
       CAST(:labels AS jsonb), :now, CASE WHEN :running THEN CAST(:now AS timestamptz) END
FROM unnest(CAST(:flavor AS text[]), CAST(:resource AS text[]), CAST(:quantity AS numeric[]))
     AS n(flavor, resource, quantity);
