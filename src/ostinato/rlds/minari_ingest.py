"""Minari datasets into tables as TF-Agents trajectories, without TensorFlow.

A Minari episode of ``n`` transitions (``observations`` ``n + 1``, the last one the final
observation; ``actions``, ``rewards``, ``terminations``, ``truncations`` ``n``) becomes the
``n + 1`` RLDS steps an RLDS logger records for it, which then become trajectories by
TF-Agents' rules, as :func:`~ostinato.rlds.push_rlds_to_table` turns RLDS steps into them:

=====================  ================================================================
RLDS step ``t < n``    ``observation`` ``observations[t]``, ``action`` ``actions[t]``,
                       ``reward`` ``rewards[t]`` (float32), ``discount`` 0.0 if
                       ``terminations[t]`` else 1.0 (float32), ``is_first`` ``t == 0``
step ``n`` (the last)  ``observation`` ``observations[n]``, ``action`` zeros, ``reward``
                       0.0, ``discount`` 1.0, ``is_last``, ``is_terminal``
                       ``terminations[n - 1]`` (a truncated episode -- or one that ended
                       neither way -- is last but not terminal)
=====================  ================================================================

so trajectory ``t < n`` is ``(FIRST|MID, observations[t], actions[t], (), MID|LAST,
rewards[t], 0.0 if terminated at t else 1.0)`` -- what
:class:`ostinato.observers.TrajectoryObserver` writes while collecting the same episode
from gymnasium -- and trajectory ``n`` is the boundary ``(LAST, observations[n], zeros, (),
FIRST, 0.0, 0.0 if terminated else 1.0)`` (TF-Agents' RLDS rule puts the terminal zero on
the boundary too; the gymnasium observer writes 1.0 there). A two-step item ``[t, t + 1]`` is
one whole transition: ``observation[0], action[0], reward[0], discount[0]`` and the next
observation ``observation[1]``. Dict and tuple observation or action spaces stay nests (no
stacking quirk here: that is TF-Agents' for RLDS dict features only); infos are not stored.

Importing this module imports neither TensorFlow nor Minari: datasets are read through the
interface a ``minari.MinariDataset`` has (``iterate_episodes()``), or any iterable of
episodes with Minari's ``EpisodeData`` fields.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import optree

from ostinato.rlds.ingest import ObserverSink, Progress, TableSink, UnitWriter, table_signature
from ostinato.rlds.specs import spec_mismatch
from ostinato.rlds.steps import Converter, MalformedEpisodeError, StepChunk
from ostinato.rlds.trajectory import trajectory_class

_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")


def _leaves(tree: Any) -> list[tuple[str, np.ndarray]]:
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False)
    return [("/".join(map(str, p)), np.asarray(x)) for p, x in zip(paths, leaves)]


def _episodes(dataset: Any) -> Iterable[Any]:
    iterate = getattr(dataset, "iterate_episodes", None)
    return iterate() if callable(iterate) else dataset


def _episode_id(episode: Any, position: int) -> Any:
    value = getattr(episode, "id", None)
    return position if value is None else int(value)


def minari_steps(episode: Any, position: int = 0) -> StepChunk:
    """One Minari episode as RLDS steps (the mapping in this module's docstring).

    Args:
      episode: a Minari ``EpisodeData`` (or anything with its fields).
      position: the episode's position, used when it has no ``id``.

    Raises:
      MalformedEpisodeError: a field is missing or not an array (per leaf), the lengths do
        not fit (``observations`` one longer than the other fields), or the episode is
        terminated or truncated before its last step; the message names the episode (and
        the step).
    """
    eid = _episode_id(episode, position)
    name = f"Minari episode {eid}"
    missing = [f for f in _FIELDS if getattr(episode, f, None) is None]
    if missing:
        raise MalformedEpisodeError(f"{name}: no {', '.join(missing)}")
    rewards = np.asarray(episode.rewards)
    if rewards.ndim != 1:
        raise MalformedEpisodeError(
            f"{name}: rewards has shape {rewards.shape}; one reward per step (shape (n,)) is needed"
        )
    n = len(rewards)
    terminated = np.asarray(episode.terminations).astype(bool)
    truncated = np.asarray(episode.truncations).astype(bool)
    for field, want, values in (
        ("terminations", n, [("", terminated)]),
        ("truncations", n, [("", truncated)]),
        ("actions", n, _leaves(episode.actions)),
        ("observations", n + 1, _leaves(episode.observations)),
    ):
        if not values:
            raise MalformedEpisodeError(f"{name}: {field} is empty")
        for path, value in values:
            got = len(value) if value.ndim else None
            if got != want:
                what = f"{field}/{path}" if path else field
                raise MalformedEpisodeError(
                    f"{name}: {what} has {got} steps, but rewards has {n}: an episode of n "
                    f"steps has n actions, rewards, terminations and truncations, and n + 1 "
                    f"observations (the last one the final observation)"
                )
    ended = np.nonzero((terminated | truncated)[:-1])[0]
    if len(ended):
        t = int(ended[0])
        how = "terminated" if terminated[t] else "truncated"
        raise MalformedEpisodeError(
            f"{name}, step {t}: {how} before the episode's last step ({n - 1}); each "
            "episode must end at its first termination or truncation"
        )
    last = np.zeros(n + 1, bool)
    last[-1] = True
    first = np.zeros(n + 1, bool)
    first[0] = True
    terminal = np.zeros(n + 1, bool)
    terminal[-1] = bool(n and terminated[-1])
    discount = np.ones(n + 1, np.float32)
    discount[:n][terminated] = 0.0
    reward = np.zeros(n + 1, np.float32)
    reward[:n] = rewards
    action = optree.tree_map(
        lambda a: (
            np.concatenate([np.asarray(a), np.zeros_like(np.asarray(a)[:1])])
            if len(a)
            else np.zeros((1, *np.shape(a)[1:]), np.asarray(a).dtype)
        ),
        episode.actions,
        none_is_leaf=False,
    )
    observation = optree.tree_map(np.asarray, episode.observations, none_is_leaf=False)
    return StepChunk(
        np.full(n + 1, eid, np.int64),
        np.arange(n + 1, dtype=np.int64),
        dict(
            observation=observation,
            action=action,
            reward=reward,
            discount=discount,
            is_first=first,
            is_last=last,
            is_terminal=terminal,
        ),
    )


def _specs(chunk: StepChunk) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    return [
        (f"{key}/{p}" if p else key, x.shape[1:], x.dtype)
        for key in ("observation", "action")
        for p, x in _leaves(chunk.columns[key])
    ]


def _check_like(chunk: StepChunk, reference: list[Any], name: str) -> None:
    got = _specs(chunk)
    if [p for p, _, _ in got] != [p for p, _, _ in reference]:
        raise MalformedEpisodeError(
            f"{name}: fields {[p for p, _, _ in got]}, but earlier episodes have "
            f"{[p for p, _, _ in reference]}"
        )
    for (path, shape, dtype), (_, shape0, dtype0) in zip(got, reference):
        if shape != shape0 or dtype != dtype0:
            raise MalformedEpisodeError(
                f"{name}: {path} has shape {shape} and dtype {dtype}, but earlier episodes "
                f"have {shape0} and {dtype0}"
            )


def _step_chunks(dataset: Any) -> Iterator[StepChunk]:
    reference = None
    for position, episode in enumerate(_episodes(dataset)):
        chunk = minari_steps(episode, position)
        if reference is None:
            reference = _specs(chunk)
        else:
            _check_like(chunk, reference, f"Minari episode {_episode_id(episode, position)}")
        yield chunk


def _first_episode(dataset: Any) -> Any:
    for episode in _episodes(dataset):
        return episode
    raise ValueError("dataset has no episodes: there is nothing to take a spec from")


def create_minari_trajectory_spec(dataset: Any) -> Any:
    """The trajectory of :class:`ostinato.TensorSpec` of one step of ``dataset`` (no time
    dimension), from its first episode: ``step_type``/``next_step_type`` ``int32 ()``
    (named ``step_type``), ``observation`` and ``action`` as stored, ``policy_info`` ``()``,
    ``reward`` and ``discount`` ``float32 ()`` (``discount`` named ``discount``).

    Raises:
      ValueError: the dataset has no episodes; MalformedEpisodeError: its first episode is
        malformed.
    """
    from ostinato.types import TensorSpec

    chunk = minari_steps(_first_episode(dataset))

    def spec(x: np.ndarray) -> TensorSpec:
        return TensorSpec(x.shape[1:], x.dtype)

    step_type = TensorSpec((), np.int32, "step_type")
    return trajectory_class(import_tf_agents=False)(
        step_type=step_type,
        observation=optree.tree_map(spec, chunk.columns["observation"], none_is_leaf=False),
        action=optree.tree_map(spec, chunk.columns["action"], none_is_leaf=False),
        policy_info=(),
        next_step_type=step_type,
        reward=TensorSpec((), np.float32),
        discount=TensorSpec((), np.float32, "discount"),
    )


def create_minari_trajectory_signature(dataset: Any) -> Any:
    """:func:`create_minari_trajectory_spec` with an outer time dimension of ``None``: the
    ``signature`` of a table for these trajectories (any ``sequence_length``)."""
    from ostinato.types import TensorSpec

    spec = create_minari_trajectory_spec(dataset)
    return optree.tree_map(
        lambda s: TensorSpec((None, *s.shape), s.dtype, s.name),
        spec,
        is_leaf=lambda x: isinstance(x, TensorSpec),
        none_is_leaf=False,
    )


def check_minari_signature(table_signature: Any, dataset: Any) -> None:
    """Raises ``ValueError`` (naming the first differing column) unless a table with
    ``table_signature`` takes ``dataset``'s trajectories (shapes and dtypes compared; a
    table without a signature takes anything)."""
    if table_signature is None:
        return
    why = spec_mismatch(table_signature, create_minari_trajectory_signature(dataset))
    if why is not None:
        raise ValueError(
            f"The table's signature does not match the Minari data's trajectories "
            f"(create_minari_trajectory_signature): {why}"
        )


def _push(dataset: Any, sink: Any, progress: bool | None) -> int:
    bar = Progress(progress, "Minari -> table")
    units = UnitWriter(sink, bar, MalformedEpisodeError)
    converter = Converter(trajectory_class(import_tf_agents=False), stack_dict_features=False)
    failed = True
    try:
        chunks = _step_chunks(dataset)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except MalformedEpisodeError as e:
                # Every episode before this one is whole: its last step's next step is a
                # first step, as the padding step is.
                units.feed(converter.finish())
                units.finish()
                raise units.fail(str(e)) from None
            units.feed(converter.feed(chunk))
        units.feed(converter.finish())
        units.finish()
        failed = False
    finally:
        bar.finish(units.written, units.episodes, failed)
    return units.written


def push_minari_to_reverb(dataset: Any, observer: Any, *, progress: bool | None = None) -> int:
    """Writes ``dataset``'s trajectories through ``observer``, one per call, one whole checked
    episode at a time (as :func:`~ostinato.rlds.push_rlds_to_reverb` does for RLDS).

    Returns:
      The number of trajectories written (``n + 1`` per episode of ``n`` transitions).

    Raises:
      MalformedEpisodeError: a malformed episode (nothing of it is written; the episodes
        before it are).
    """
    return _push(dataset, ObserverSink(observer), progress)


def push_minari_to_table(
    dataset: Any,
    client: Any,
    table: Any,
    *,
    sequence_length: int = 2,
    stride_length: int = 1,
    priority: float = 1.0,
    pad_end_of_episodes: bool = False,
    tile_end_of_episodes: bool = False,
    progress: bool | None = None,
    timeout: float | None = None,
    max_pending_items: int | None = 512,
    max_steps_per_second: float | None = None,
) -> int:
    """Writes a Minari dataset into ``table`` with TF-Agents' trajectory windows.

    The items :func:`~ostinato.rlds.push_rlds_to_table` writes for the same episodes recorded
    as RLDS (see this module's docstring for the mapping): ``sequence_length``-step windows
    every ``stride_length`` steps, never across an episode boundary. No TensorFlow is
    imported.

    Args:
      dataset: a ``minari.MinariDataset`` (e.g. ``minari.load_dataset(id)``), or any iterable
        of episodes with Minari's ``EpisodeData`` fields.
      client: an :class:`ostinato.Client`, embedded or networked.
      table: a table name, or a sequence of names (each item goes to every table; the data
        is stored once). The tables must exist; the first one's signature, if it has one,
        must be :func:`create_minari_trajectory_signature`'s (shapes and dtypes).
      sequence_length, stride_length, priority, pad_end_of_episodes, tile_end_of_episodes:
        as :class:`~ostinato.observers.TrajectoryObserver`'s.
      progress: show a progress line (steps, episodes, steps/s) and a summary on stderr;
        ``None``: only when stderr is a terminal.
      timeout: seconds any one blocking wait may take; ``None``: no limit.
      max_pending_items, max_steps_per_second: as :func:`~ostinato.rlds.push_rlds_to_table`'s.

    Returns:
      The number of trajectories written (``n + 1`` per episode of ``n`` transitions).

    Raises:
      ostinato.errors.TableNotFoundError: a table does not exist.
      ValueError: the table's signature does not match, or an argument is invalid.
      MalformedEpisodeError: a malformed episode, named with its id (and step): nothing of it
        is in the table; the episodes before it are.
      ostinato.errors.DeadlineExceededError: a wait took longer than ``timeout``.

    Example:
      >>> dataset = minari.load_dataset("D4RL/pen/human-v2")   # a local dataset
      >>> signature = rlds.create_minari_trajectory_signature(dataset)
      >>> server = ostinato.Server([ostinato.Table.queue("replay", 10**6, signature=signature)])
      >>> rlds.push_minari_to_table(dataset, server.localhost_client(), "replay")
    """
    sink = TableSink(
        client,
        table,
        sequence_length,
        stride_length,
        priority,
        pad_end_of_episodes,
        tile_end_of_episodes,
        timeout,
        max_pending_items,
        max_steps_per_second,
    )

    def push() -> int:
        check_minari_signature(table_signature(client, sink.tables[0], timeout), dataset)
        return _push(dataset, sink, progress)

    return sink.run(push)


def load_minari(dataset_id_or_path: str) -> Any:
    """A local Minari dataset, by path (a dataset directory or its ``data`` directory) or by
    id (looked up under ``$MINARI_DATASETS_PATH``, default ``~/.minari/datasets``). Never
    downloads.

    Raises:
      ImportError: minari is not installed (``pip install 'ostinato[minari]'``).
      FileNotFoundError: no such local dataset (the message says where it looked).
    """
    try:
        import minari
        from minari.storage import get_dataset_path
    except ImportError as e:
        raise ImportError(
            f"reading Minari datasets needs minari: pip install 'ostinato[minari]' ({e})"
        ) from e
    path = os.path.expanduser(dataset_id_or_path)
    if os.path.isdir(path):
        data = os.path.join(path, "data") if os.path.isdir(os.path.join(path, "data")) else path
        if not os.path.exists(os.path.join(data, "metadata.json")):
            raise FileNotFoundError(
                f"{dataset_id_or_path!r} is a directory, but not a Minari "
                f"dataset (no metadata.json in {data})"
            )
        return minari.MinariDataset(data)
    root = get_dataset_path(dataset_id_or_path)
    if not os.path.exists(os.path.join(root, "data", "metadata.json")):
        raise FileNotFoundError(
            f"No local Minari dataset {dataset_id_or_path!r}: neither a directory nor an id "
            f"found under {get_dataset_path()} (set MINARI_DATASETS_PATH to look elsewhere). "
            "Datasets are never downloaded here: use `minari download` first."
        )
    return minari.load_dataset(dataset_id_or_path, download=False)
