"""The `tessera` command: one subcommand per job, PBG's command-line shape.

Each subcommand parses its flags here and calls one function of the package; heavy imports
(torch, pyarrow) happen inside the subcommand so that `tessera --help` and `tessera config`
stay fast.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from .errors import BadInputError, ConfigError, TesseraError, TransientError
from .log_records import CHECKPOINT_COMMITTED, CHECKPOINT_VERSION, EVALUATION_FINISHED
from .openmp_waits import shorten_spinning
from .os_errors import PROCESS_LIMITS, classify_local, shared_memory_error
from .process_start import check_working_directory, open_closed_streams, raise_open_file_limit
from .progress import Reporter, report_logs
from .stop_signals import Terminated, install_stop_handlers
from .training.allocator import one_heap_for_all_threads

# Exit codes of a command stopped by a signal, as shells report them: 128 + the signal.
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
EXIT_TERMINATED = 128 + signal.SIGTERM


def _print_error(args: argparse.Namespace, error: Exception) -> None:
    """The one line of a classified error; it names files, and a URL's password never."""
    from .config.redaction import without_url_credentials

    print(without_url_credentials(f"tessera {args.command}: error: {error}"), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    reporter = Reporter("quiet" if args.quiet else args.log_format)
    report_logs(reporter)
    try:
        check_working_directory()
        _serve_metrics(args, reporter)
        return int(args.run(args, reporter) or 0)
    except TesseraError as error:
        _print_error(args, error)
        return error.exit_code
    except OSError as error:  # a disk error where no storage call named the file
        named = _named_os_error(error)
        if named is None:
            raise
        _print_error(args, named)
        return named.exit_code
    except (MemoryError, RuntimeError) as error:
        memory = _memory_error(error)
        if memory is None:
            raise
        _print_error(args, memory)
        return memory.exit_code
    except KeyboardInterrupt:
        print(f"tessera {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print(f"tessera {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except StdoutClosed:
        return EXIT_BROKEN_PIPE


def _memory_error(error: BaseException) -> TesseraError | None:
    """The one-line error for memory that ran out: the process's own (Python's MemoryError,
    torch's CPU allocator refusing a tensor) or the shared memory of Hogwild's workers."""
    if isinstance(error, MemoryError) or "can't allocate memory" in str(error):
        return BadInputError(
            f"out of memory ({_allocation(error)}); lower dimension, "
            "batch_size, workers or partition_cache_gb, or run on a machine with more memory")
    return shared_memory_error(error)


def _allocation(error: BaseException) -> str:
    """What the failed allocation asked for, as torch says it (Python's MemoryError does not)."""
    asked = re.search(r"tried to allocate (\d+) bytes", str(error))
    return f"{int(asked.group(1)) / 1e9:.3g} GB asked for" if asked else "an allocation failed"


def _named_os_error(error: OSError) -> TesseraError | None:
    """The last resort for an OSError about a file: the error of its errno's family (an
    unknown errno counts as transient: the machine, not the input, is the likelier cause)."""
    if error.errno in PROCESS_LIMITS:  # about no one file: the process's or machine's
        return classify_local(error)
    if not error.filename or error.errno is None:
        return None  # no file to name: a bug, whose traceback helps
    classified = classify_local(error)
    if classified is not None:
        return classified
    reason = error.strerror or os.strerror(error.errno)
    if isinstance(error, FileNotFoundError):
        return BadInputError(f"{error.filename}: {reason}; fix the path")
    return TransientError(f"{error.filename}: {reason}; retry")


def run() -> NoReturn:
    """The `tessera` command: `main`, then the end of a normal exit (other threads waited
    for, exit handlers run, output flushed) without taking the interpreter apart: torch's
    modules and libraries take 0.3-0.6 s to tear down, a quarter of a short training run."""
    open_closed_streams()
    raise_open_file_limit()
    shorten_spinning()  # before a subcommand imports torch
    install_stop_handlers()
    one_heap_for_all_threads()  # before any thread starts
    code = main()
    # What the interpreter's exit does first, in its order: threading's exit callbacks (which
    # stop idle thread pools), other threads joined, then exit handlers.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed reader, a closed stream
            stream.flush()
    os._exit(code)


class StdoutClosed(Exception):
    """Whoever read our output has stopped reading (`tessera config schema | head`)."""


def print_result(text: str) -> None:
    """Print a command's result; a closed reader ends the command quietly, the Unix way."""
    try:
        print(text)
        sys.stdout.flush()  # a closed reader shows here, not at interpreter exit
    except BrokenPipeError:
        _drop_stdout()
        raise StdoutClosed from None
    except OSError as error:  # a full disk (or another failure) under a redirected stdout
        classified = classify_local(error, "standard output")
        if classified is None:
            raise
        _drop_stdout()
        raise classified from None


def _drop_stdout() -> None:
    """Python's recipe (signal module docs): point stdout at /dev/null so that the
    interpreter's last flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessera", description="Train embeddings of huge multi-relation graphs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_import(commands)
    _add_train(commands)
    _add_lock_server(commands)
    _add_partition_server(commands)
    _add_eval(commands)
    _add_tune(commands)
    _add_export(commands)
    _add_neighbors(commands)
    _add_config(commands)
    return parser


def _common(parser: argparse.ArgumentParser, *, with_config: bool = True) -> None:
    if with_config:
        parser.add_argument("config", help="config file: YAML, JSON or a PBG Python config")
        parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                            help="override a config key (dotted path, e.g. -p num_epochs=5 "
                            "-p relations.0.operator=translation); repeatable")
    parser.add_argument("--quiet", action="store_true", help="print only errors")
    parser.add_argument("--log-format", choices=["auto", "human", "json"], default="auto",
                        help="progress style; auto: human on a terminal, JSON lines otherwise")


def _metrics_flag(parser: argparse.ArgumentParser) -> None:
    from .metrics_address import METRICS_PORT_ENV

    parser.add_argument("--metrics-port", default=os.environ.get(METRICS_PORT_ENV) or None,
                        metavar="[HOST:]PORT",
                        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: "
                        f"${METRICS_PORT_ENV}, else none; HOST defaults to every interface)")


def _serve_metrics(args: argparse.Namespace, reporter: Reporter) -> None:
    """Serve /metrics fed by what `reporter` reports, for a role that asked for it (a local
    cluster hands the port on to its roles instead)."""
    if getattr(args, "metrics_port", None) is None or getattr(args, "local_cluster", False):
        return
    from .metrics import serve
    from .metrics_address import parse_address

    metrics = serve(parse_address(args.metrics_port, "--metrics-port"))
    if metrics is not None:
        reporter.listeners.append(metrics.record)


def _load(args: argparse.Namespace) -> Any:
    from .config import load_config

    return load_config(args.config, args.param)


def _add_import(commands: Any) -> None:
    parser = commands.add_parser(
        "import", help="turn TSV/CSV/Parquet edge lists into partitioned HDF5 buckets",
        description="Import edge lists: one INPUT per entry of the config's edge_paths. "
        "Writes entity counts and names to entity_path and buckets to each edge path.")
    _common(parser)
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="edge list file or URL")
    parser.add_argument("--lhs-col", type=_column, default=0,
                        help="column of the source: 0-based index, or its name in the header "
                        "(--header) or Parquet schema")
    parser.add_argument("--rhs-col", type=_column, default=1,
                        help="column of the target (index or name)")
    parser.add_argument("--rel-col", type=_column, default=None,
                        help="column of the relation name, index or name (default: all edges "
                        "are of the first relation)")
    parser.add_argument("--format", dest="input_format", choices=["tsv", "csv", "parquet"],
                        help="input format (default: from the file extension)")
    parser.add_argument("--delimiter", help="field separator of text inputs")
    parser.add_argument("--skip-rows", type=int, default=0,
                        help="header lines to skip at the top of each text input")
    parser.add_argument("--header", dest="skip_rows", action="store_const", const=1,
                        help="the first line of each text input is a header: skip it "
                        "(same as --skip-rows 1; Parquet inputs have column names already)")
    parser.add_argument("--partitioning", choices=["random", "hash"], default="random",
                        help="how entities are assigned to partitions")
    parser.add_argument("--seed", type=int, default=0, help="seed of random partitioning")
    parser.add_argument("--entity-min-count", type=int, default=1,
                        help="drop entities seen fewer times, with their edges")
    parser.add_argument("--relation-type-min-count", type=int, default=1,
                        help="with dynamic relations, drop rarer relation types")
    parser.add_argument("--features", action="append", type=_type_and_file, default=[],
                        metavar="TYPE=FILE",
                        help="the features of featurized entity type TYPE: one "
                        "'entity<TAB>feature' row per feature of each entity (repeat for "
                        "each featurized type)")
    parser.add_argument("--replace-dictionary", action="store_true",
                        help="build a new entity dictionary from the inputs alone instead of "
                        "extending the one already in entity_path (known entities may then "
                        "change ids, and checkpoints trained on them no longer fit)")
    parser.set_defaults(run=_run_import)


def _column(text: str) -> int | str:
    """A column flag's value: an index if it is a number, else a name."""
    return int(text) if text.lstrip("-").isdigit() else text


def _type_and_file(value: str) -> tuple[str, str]:
    entity_type, equals, url = value.partition("=")
    if not equals or not entity_type or not url:
        raise argparse.ArgumentTypeError(f"expected TYPE=FILE, got {value!r}")
    return entity_type, url


def _run_import(args: argparse.Namespace, reporter: Reporter) -> int:
    from .importing import ImportOptions, import_edges

    options = ImportOptions(
        lhs_col=args.lhs_col, rhs_col=args.rhs_col, rel_col=args.rel_col,
        input_format=args.input_format, delimiter=args.delimiter, skip_rows=args.skip_rows,
        partitioning=args.partitioning, seed=args.seed,
        entity_min_count=args.entity_min_count,
        relation_type_min_count=args.relation_type_min_count,
        entity_features=dict(args.features),
        replace_dictionary=args.replace_dictionary)
    import_edges(_load(args), args.inputs, options, reporter)
    return 0


def _add_train(commands: Any) -> None:
    parser = commands.add_parser(
        "train", help="train embeddings (resumes from the checkpoint if there is one)",
        description="Train on this machine; or, with --rank R, as trainer R of a distributed "
        "job (next to `tessera lock-server` and `tessera partition-server`); or, with "
        "--local-cluster, run every role of a distributed job here as local processes.")
    _common(parser)
    parser.add_argument("--rank", type=int, default=None,
                        help="train as trainer RANK (0 to num_machines - 1) of a distributed "
                        "job")
    parser.add_argument("--local-cluster", action="store_true",
                        help="start the lock server, partition servers and trainers of a "
                        "distributed job as local processes on 127.0.0.1")
    parser.add_argument("--trainers", type=int, default=None, metavar="M",
                        help="with --local-cluster: number of trainers (default: the "
                        "config's num_machines)")
    parser.add_argument("--partition-servers", type=int, default=None, metavar="P",
                        help="with --local-cluster: number of partition servers (default: the "
                        "config's num_partition_servers; -1 means one per trainer)")
    _distributed_flags(parser)
    _metrics_flag(parser)
    parser.set_defaults(run=_run_train)


def _distributed_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--init-method", default=None, metavar="URL",
                        help="the lock server's rendezvous address, tcp://HOST:PORT (default: "
                        "$TESSERA_INIT_METHOD, else the config's distributed_init_method)")
    parser.add_argument("--peer-timeout", type=float, default=None, metavar="SECONDS",
                        help="a peer silent this long is lost and the job stops (default: "
                        "$TESSERA_PEER_TIMEOUT_S, else 20)")
    parser.add_argument("--rendezvous-timeout", type=float, default=None, metavar="SECONDS",
                        help="how long to wait for every role to join (default: "
                        "$TESSERA_RENDEZVOUS_TIMEOUT_S, else 600)")


def _settings(args: argparse.Namespace, config: Any) -> Any:
    from .distributed.settings import distributed_settings

    return distributed_settings(config, args.init_method, args.peer_timeout,
                                args.rendezvous_timeout)


def _run_train(args: argparse.Namespace, reporter: Reporter) -> int:
    if args.local_cluster:
        return _run_local_cluster(args, reporter)
    if args.trainers is not None or args.partition_servers is not None:
        raise ConfigError("--trainers/--partition-servers", "only with --local-cluster")
    config = _load(args)
    if not config.verbose:  # one commit line per epoch would push the live line away
        reporter.folded_events[CHECKPOINT_COMMITTED] = CHECKPOINT_VERSION
    from .tracking import tracking

    with tracking(config, reporter, args.rank):
        if args.rank is not None:
            from .distributed.trainer import run_trainer

            run_trainer(config, args.rank, _settings(args, config), reporter)
            return 0
        from .training.coordinator import train

        train(config, reporter)
    return 0


def _run_local_cluster(args: argparse.Namespace, reporter: Reporter) -> int:
    from .distributed.local_cluster import run_local_cluster
    from .distributed.settings import peer_timeout_setting
    from .distributed.world import WorldLayout
    from .metrics_address import parse_address

    if args.rank is not None:
        raise ConfigError("--rank", "--local-cluster starts every rank itself; drop --rank")
    config = _load(args)
    trainers = config.num_machines if args.trainers is None else args.trainers
    servers = config.num_partition_servers if args.partition_servers is None \
        else args.partition_servers
    if trainers < 1:
        raise ConfigError("--trainers", f"must be at least 1, got {trainers}")
    if servers < -1:
        raise ConfigError("--partition-servers", f"must be -1 (one per trainer) or more, got "
                          f"{servers}")
    layout = WorldLayout(trainers if servers == -1 else servers, trainers)
    role_args = ["--quiet"] if reporter.mode == "quiet" else ["--log-format", reporter.mode]
    if args.rendezvous_timeout is not None:
        role_args += ["--rendezvous-timeout", str(args.rendezvous_timeout)]
    metrics = None if args.metrics_port is None \
        else parse_address(args.metrics_port, "--metrics-port")
    return run_local_cluster(args.config, args.param, layout,
                             peer_timeout_setting(args.peer_timeout), role_args, reporter,
                             metrics)


def _add_lock_server(commands: Any) -> None:
    parser = commands.add_parser(
        "lock-server", help="run the lock server of a distributed job",
        description="Host the rendezvous at the config's distributed_init_method, hand out "
        "buckets to the trainers, collect their progress and hold the checkpoint barrier.")
    _common(parser)
    _distributed_flags(parser)
    _metrics_flag(parser)
    parser.set_defaults(run=_run_lock_server)


def _run_lock_server(args: argparse.Namespace, reporter: Reporter) -> int:
    from .distributed.lock_server import run_lock_server

    config = _load(args)
    run_lock_server(config, _settings(args, config), reporter)
    return 0


def _add_partition_server(commands: Any) -> None:
    parser = commands.add_parser(
        "partition-server", help="run partition server RANK of a distributed job",
        description="Keep a shard of the partitions (and of the shared parameters) while no "
        "trainer holds them, and write them into each checkpoint.")
    _common(parser)
    parser.add_argument("--rank", type=int, required=True,
                        help="which server: 0 to num_partition_servers - 1")
    _distributed_flags(parser)
    _metrics_flag(parser)
    parser.set_defaults(run=_run_partition_server)


def _run_partition_server(args: argparse.Namespace, reporter: Reporter) -> int:
    from .distributed.partition_server import run_partition_server

    config = _load(args)
    run_partition_server(config, args.rank, _settings(args, config), reporter)
    return 0


def _add_eval(commands: Any) -> None:
    parser = commands.add_parser(
        "eval", help="rank held-out edges: MRR, Hits@1/10/50, mean rank, AUC",
        description="Evaluate the latest checkpoint on the config's edge_paths (override them "
        "with -p edge_paths=...). With --filtered, every entity is a candidate and the "
        "other true edges found in the --filter-paths edge sets are not counted as errors.")
    _common(parser)
    parser.add_argument("--split", metavar="NAME",
                        help="evaluate one split: an edge path of the config named so (its "
                        "last folder: train, valid, test as imported) or an edge set's path")
    parser.add_argument("--filtered", action="store_true",
                        help="rank against all entities, removing known true edges")
    parser.add_argument("--filter-paths", nargs="+", default=None, metavar="EDGE_PATH",
                        help="edge sets whose edges are known true (default with --filtered: "
                        "the config's edge_paths, every split, before --split chose one)")
    parser.add_argument("--output", help="also write the metrics to this JSON file (path or "
                        "URL; its folder is created if missing)")
    parser.set_defaults(run=_run_eval)


def _run_eval(args: argparse.Namespace, reporter: Reporter) -> int:
    from .data.graph_data import check_flag_edge_sets
    from .evaluation.command import evaluate_checkpoint
    from .evaluation.output import check_metrics_output
    from .evaluation.splits import choose_split
    from .publishing import write_output_file

    config = _load(args)
    filter_paths = args.filter_paths or config.edge_paths
    if args.filtered and args.filter_paths:
        check_flag_edge_sets(config, "--filter-paths", args.filter_paths)
    if args.split:
        config = dataclasses.replace(config, edge_paths=choose_split(config.edge_paths,
                                                                     args.split))
    if args.output:  # refused now rather than after the evaluation
        check_metrics_output(args.output, config)
    if sys.stdout.isatty():  # the metrics printed below are in view: not twice
        reporter.fields_printed_as_result.add(EVALUATION_FINISHED)
    metrics = evaluate_checkpoint(config, reporter, filtered=args.filtered,
                                  filter_paths=filter_paths)
    if args.output:
        write_output_file(args.output, json.dumps(metrics, indent=2) + "\n", config)
    print_result(json.dumps(metrics, indent=2))
    return 0


def _add_tune(commands: Any) -> None:
    parser = commands.add_parser(
        "tune", help="search lr, dimension, N3, negatives and epochs for the best validation MRR",
        description="Train trials of CONFIG with values drawn from a search space (Optuna), "
        "judge each by the filtered MRR of the --valid edge set (never the test split), stop "
        "bad ones early from that MRR every --valid-every epochs or the held-out MRR of "
        "eval_fraction, and write the best config to "
        "checkpoint_path/tune/best.yaml (and refit.yaml: the same, trained on --valid too). "
        "The study is kept there: the same command again "
        "continues it.")
    _common(parser)
    parser.add_argument("--valid", metavar="EDGE_PATH",
                        help="the validation edge set that judges each trial (required)")
    parser.add_argument("--filter-paths", nargs="+", default=[], metavar="EDGE_PATH",
                        help="more edge sets whose edges are known true when ranking (the "
                        "training edge_paths and --valid always are)")
    parser.add_argument("--space", metavar="FILE",
                        help="YAML search space: key: {low, high[, log, step]} or {choices}; "
                        "default: lr, dimension, regularization_coef, num_uniform_negs, "
                        "num_epochs (docs/cli.md)")
    parser.add_argument("--trials", type=int, default=30,
                        help="trials of the study in all, this run's and earlier ones' (30)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="start no trial after this many seconds of this run")
    parser.add_argument("--startup-trials", type=int, default=5, metavar="N",
                        help="trials that run to the end before any is pruned (5)")
    parser.add_argument("--warmup-epochs", type=int, default=5, metavar="N",
                        help="epochs a trial trains before it may be pruned (5)")
    parser.add_argument("--valid-every", type=int, default=0, metavar="N",
                        help="rank --valid every N epochs of a trial and prune by that MRR "
                        "(default 0: prune by eval_fraction's held-out MRR, if any)")
    parser.set_defaults(run=_run_tune)


def _run_tune(args: argparse.Namespace, reporter: Reporter) -> int:
    from .tuning.command import TuneOptions, tune

    result = tune(args.config, args.param, TuneOptions(
        args.valid, tuple(args.filter_paths), args.space, args.trials, args.timeout,
        args.startup_trials, args.warmup_epochs, args.valid_every), reporter)
    if result.best_config is not None:
        precision = "" if result.valid_mrr_stderr is None else \
            f", standard error {result.valid_mrr_stderr:.4f}"
        print_result(f"best config: {result.best_config} (trial {result.best_trial}, "
                     f"filtered valid MRR {result.valid_mrr:.4f}{precision})\n"
                     f"train it:    tessera train {result.best_config}\n"
                     f"or, for the final model, on the validation edges too:\n"
                     f"             tessera train {result.refit_config}")
    return 0


def _add_export(commands: Any) -> None:
    parser = commands.add_parser(
        "export", help="write embeddings (with entity names) and relation parameters",
        description="Export the latest checkpoint: embeddings as TSV (name then values) or "
        "HDF5/NumPy, and relation operator parameters as TSV. The files appear in OUTPUT all "
        "together, or, if anything fails, none does.")
    _common(parser)
    parser.add_argument("output", help="output directory (path or URL)")
    parser.add_argument("--format", dest="output_format", choices=["tsv", "h5", "npy"],
                        default="tsv", help="format of the embeddings (default tsv)")
    parser.add_argument("--entity-types", nargs="+", default=None,
                        help="only these entity types (default: all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files of the same names already in OUTPUT (default: "
                        "refuse them)")
    parser.set_defaults(run=_run_export)


def _run_export(args: argparse.Namespace, reporter: Reporter) -> int:
    from .exporting import export_checkpoint

    export_checkpoint(_load(args), args.output, reporter, output_format=args.output_format,
                      entity_types=args.entity_types, overwrite=args.overwrite)
    return 0


def _add_neighbors(commands: Any) -> None:
    parser = commands.add_parser(
        "neighbors", help="the entities nearest to some entities, by the model's scores",
        description="For each NAME, the K entities the latest checkpoint scores highest: by "
        "the comparator against entities of its type (the name itself left out), or, with "
        "--relation, as the model ranks the other side of edges (NAME, R, ?) (--side rhs) or "
        "(?, R, NAME) (--side lhs). Exact search, streaming the embeddings block by block. "
        "Prints one line per neighbour: name, rank, neighbour, score (tab-separated).")
    _common(parser)
    parser.add_argument("names", nargs="+", metavar="NAME", help="entity name")
    parser.add_argument("-k", "--k", type=int, default=10, help="neighbours per name (10)")
    parser.add_argument("--entity-type", default=None,
                        help="the names' entity type, when a name exists in several")
    parser.add_argument("--relation", default=None, metavar="R",
                        help="rank the other side of edges of relation R through its operator")
    parser.add_argument("--side", choices=["rhs", "lhs"], default="rhs",
                        help="with --relation: rank right-hand sides of (NAME, R, ?) (rhs, the "
                        "default) or left-hand sides of (?, R, NAME) (lhs)")
    parser.add_argument("--block-rows", type=int, default=None, metavar="N",
                        help="embedding rows read and scored at once (default: bounded by the "
                        "number of names)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document instead of tab-separated lines")
    parser.set_defaults(run=_run_neighbors)


def _run_neighbors(args: argparse.Namespace, reporter: Reporter) -> int:
    from .querying.trained import TrainedModel

    model = TrainedModel(_load(args), reporter)
    found = model.neighbors_of_each(args.names, args.k, entity_type=args.entity_type,
                                    relation=args.relation, side=args.side,
                                    block_rows=args.block_rows)
    if args.json:
        print_result(json.dumps({
            "k": args.k, "comparator": model.config.comparator, "relation": args.relation,
            "side": args.side if args.relation else None,
            "checkpoint_version": model.version,
            "queries": [{"name": name, "neighbors": [
                {"name": n.name, "entity_type": n.entity_type, "score": n.score}
                for n in neighbors]} for name, neighbors in found.items()]}, indent=2))
        return 0
    print_result("\n".join(f"{name}\t{rank}\t{n.name}\t{n.score:.6g}"
                            for name, neighbors in found.items()
                            for rank, n in enumerate(neighbors, start=1)))
    return 0


def _add_config(commands: Any) -> None:
    parser = commands.add_parser("config", help="check a config, or print its JSON Schema")
    parser.add_argument("action", choices=["check", "schema"],
                        help="check: validate CONFIG and print it with defaults filled in; "
                        "schema: print the JSON Schema of configs")
    parser.add_argument("config", nargs="?", help="config file (for check)")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (as for the other commands)")
    _common(parser, with_config=False)
    parser.set_defaults(run=_run_config, usage_error=parser.error)


def _run_config(args: argparse.Namespace, reporter: Reporter) -> int:
    from .config import config_json_schema
    from .config.redaction import redacted

    if args.action == "schema":
        print_result(json.dumps(config_json_schema(), indent=2))
        return 0
    if not args.config:
        args.usage_error("check needs a CONFIG file")  # exits 2, as argparse's errors do
    print_result(json.dumps(redacted(_load(args).to_dict()), indent=2))
    return 0
