"""Random partial DFAs of RegBench (seq_icl `src/dataloaders/dfa.py`), written from the protocol.

An automaton is a transition table `delta[state][letter] -> state or -1` (-1 = no edge; a
missing edge leads to an implicit dead state). Every state is accepting, the start state is 0,
so a string is in the language iff it follows existing edges from state 0.

Sampling (per instance): n_states in [4, 12], alphabet of n_letters in [4, 18] distinct letters
out of 18, every state gets 1..3 outgoing edges on distinct letters to distinct *other* states
(no self-loops); then the automaton is minimised (unreachable states dropped, equivalent states
merged, states renumbered in BFS order from 0).

Example:
>>> dfa = sample_dfa(np.random.default_rng(0))
>>> dfa.n_states, dfa.accepts([]), dfa.accepts(dfa.sample_string(np.random.default_rng(1), 5))
(9, True, True)
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

N_LETTERS = 18  # letters are tokens 1..18; 0 = pad, 19 = separator


@dataclass(frozen=True)
class DFA:
    """delta: [n_states, N_LETTERS] int array, -1 = no transition. Letters are 0-based here."""
    delta: np.ndarray

    @property
    def n_states(self) -> int:
        return int(self.delta.shape[0])

    def step(self, state: int, letter: int) -> int:
        """Next state, or -1 when the edge does not exist (or `state` is already dead)."""
        return -1 if state < 0 else int(self.delta[state, letter])

    def run(self, letters) -> int:
        """State after reading `letters` from the start state 0 (-1 = fell off the automaton)."""
        s = 0
        for a in letters:
            s = self.step(s, a)
            if s < 0:
                return -1
        return s

    def accepts(self, letters) -> bool:
        return self.run(letters) >= 0

    def valid_letters(self, state: int) -> np.ndarray:
        return np.flatnonzero(self.delta[state] >= 0) if state >= 0 else np.array([], int)

    def sample_string(self, rng: np.random.Generator, length: int) -> list[int]:
        """A uniformly random walk of `length` letters from state 0 (every state has an edge)."""
        s, out = 0, []
        for _ in range(length):
            options = self.valid_letters(s)
            a = int(options[rng.integers(len(options))])
            out.append(a)
            s = int(self.delta[s, a])
        return out

    def key(self) -> bytes:
        """Canonical bytes (states are BFS-numbered after `minimize`): equal keys = same automaton."""
        return self.delta.astype(np.int8).tobytes() + bytes([self.n_states])


def _reachable_bfs_order(delta: np.ndarray) -> list[int]:
    order, seen, queue = [], {0}, deque([0])
    while queue:
        s = queue.popleft()
        order.append(s)
        for t in delta[s]:
            if t >= 0 and t not in seen:
                seen.add(int(t))
                queue.append(int(t))
    return order


def minimize(delta: np.ndarray) -> DFA:
    """Minimal DFA of the same language (all states accepting, implicit dead state for -1).

    Moore partition refinement: two live states are equivalent iff they have edges on the same
    letters and, letter by letter, equivalent targets. Start from one block of all reachable
    states and split by (own block, block of each successor or -1) until stable; then renumber the
    blocks in BFS order from the start state, which makes the result canonical.
    """
    delta = np.asarray(delta)
    states = _reachable_bfs_order(delta)
    index = {s: i for i, s in enumerate(states)}
    sub = np.array([[index[t] if t >= 0 else -1 for t in delta[s]] for s in states])  # reachable
    block = np.zeros(len(states), dtype=np.int64)
    while True:
        signature = [(block[i], *[block[t] if t >= 0 else -1 for t in sub[i]])
                     for i in range(len(states))]
        ids: dict[tuple, int] = {}
        new = np.array([ids.setdefault(sig, len(ids)) for sig in signature])
        if len(ids) == len(set(block.tolist())):
            break
        block = new
    # quotient automaton on blocks, then BFS renumbering from the start block
    n_blocks = int(block.max()) + 1
    quotient = np.full((n_blocks, delta.shape[1]), -1, dtype=np.int64)
    for i in range(len(states)):
        quotient[block[i]] = [block[t] if t >= 0 else -1 for t in sub[i]]
    order = _reachable_bfs_order(quotient)
    rename = {b: i for i, b in enumerate(order)}
    canon = np.array([[rename[t] if t >= 0 else -1 for t in quotient[b]] for b in order])
    return DFA(canon.astype(np.int64))


def sample_dfa(rng: np.random.Generator, min_states: int = 4, max_states: int = 12,
               min_letters: int = 4, max_letters: int = N_LETTERS, max_edges: int = 3) -> DFA:
    """One random automaton, minimised (seq_icl: integers(4, 13), integers(4, 19), integers(1, 4))."""
    n_states = int(rng.integers(min_states, max_states + 1))
    n_letters = int(rng.integers(min_letters, max_letters + 1))
    alphabet = rng.choice(N_LETTERS, size=n_letters, replace=False)
    delta = np.full((n_states, N_LETTERS), -1, dtype=np.int64)
    for s in range(n_states):
        n_edges = int(rng.integers(1, max_edges + 1))
        letters = rng.choice(alphabet, size=n_edges, replace=False)
        targets = rng.choice([t for t in range(n_states) if t != s], size=n_edges, replace=False)
        delta[s, letters] = targets
    return minimize(delta)
