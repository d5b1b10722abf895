"""TASO's cost-based backtracking search over proved rules, region by region.

A priority queue holds graphs by predicted cost. Each popped graph is rewritten by every match of every rule
(both directions: a proved rule is an equality); a new graph is kept if no graph with the same structure was
seen, and queued if its cost is under ``alpha`` times the best so far (alpha > 1 lets the search pass through
slightly worse graphs to reach better ones) and it has fewer than twice the original's nodes. A rewrite
that does not pay (but is within alpha) is also tried at once with each shrinking rewrite it opens, and a
pair that pays is a candidate of its own: the queue would reach it late or never. A rewrite by a rule that
grows the graph, that does not pay and opens no rewrite but growing ones and its own undo (`taso.search.growth`),
is no candidate: neither counted nor queued, it leads nowhere the graph before it does not. The search
stops when the queue empties or its work is spent (graphs expanded: ``budget`` a pass, `PASSES` budgets a
region on average). Rules and matches are tried in a fixed order and the work is counted, not timed, so a
given store, model and cost table always give the same result, on a fast machine or a loaded one; the time
limit is a safety net, and a result it cut short says so (`SearchResult.timed_out`).

Large models are cut into regions (`taso.regions`), each searched on its own, so the work per node does not
grow with the model. A region of the same `Graph.form` as one searched before (another layer of a transformer,
another time step of an RNN) is not searched again: the steps that rewrote its twin are replayed on it
(`replay`), so repeated blocks get one decision and the work goes elsewhere.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from taso.ir import Graph, Node, correspondence, extract
from taso.rules import (
    Match,
    Rule,
    RuleIndex,
    all_matches,
    find_matches,
    surviving,
)
from taso.search.growth import DEAD_END, Opened, Opens, grows
from taso.search.regions import (
    CYCLE,
    MAX_REGION,
    closes_cycle,
    disjoint,
    outside_links,
    regions,
    splice,
    surely_cycles,
    windows,
    with_context,
)
from taso.search.rewrite import Declined, Folds, Unfit, apply

Cost = Callable[[Graph], float]
Prefetch = Callable[[Sequence[Graph]], None]
"""Told the candidates of one expansion before each is costed (`Cost`): a cost model that measures what it
does not know measures their new units side by side then, not one candidate's one or two at a time."""
Clock = Callable[[], float]
"""Seconds from some start: what a search's time limit is counted in."""
Mutate = Callable[[Graph], Iterable[tuple[str, Graph]]]
"""Rewrites that are not rule matches (`taso.pet.mutations`): each a name and the rewritten graph."""
PASSES = 4
"""Budgets of work a region's search gets on average (`optimize_graph` shares them out by region size). With a
budget of 20, no region of the zoo needed more than three passes (Inception-v1: 60 graphs for one region)."""
BUDGET = 25
"""Graphs a region's search expands per pass by default. Over the corpus's 45 models (H200 table), 25 gave a
cheaper graph than 100 on 7, a costlier one on 2 (MobileOne +2 %, wav2vec2_dynamo +0.7 %), predicted cost 0.991x
geomean, at half the search's CPU (llama_dynamo 40 -> 14 s; bench/results/2026-11-29/search-cpu-budget.json)."""
CANDIDATES = 3000
"""Candidate graphs a whole search costs at most (`optimize_graph`; a region gets what those before it left): the
time a search takes follows its candidates, 3-35 ms each on the 2-core machine, while an expansion makes 1 to
over 20 of them; the zoo's searches at the regression's budget of 20 cost fewer (Inception-v1: 2,129)."""


def _cheaper(cost: float, than: float) -> bool:
    """Whether ``cost`` is below ``than`` by more than rounding: a graph of the same units summed in another
    order costs a few ulps more or less (GPT-2's GELU Muls with their operands swapped: 5e-17 ms "cheaper"),
    and such a step is no gain, so it neither stands as the result nor earns another pass of the search."""
    return cost < than - 1e-9 * abs(than)


@dataclass(frozen=True)
class Step:
    """One rewrite on the way to a result: its name, and for a rule the match in the graph it rewrote (None for
    a PET mutant, which `replay` cannot carry over)."""

    name: str
    match: Match | None
    before: Graph


@dataclass
class SearchResult:
    graph: Graph
    cost_before: float
    cost_after: float
    applied: Counter = field(default_factory=Counter)
    """How often each rule was applied, by `Rule.id` (a PET mutant by its name)."""
    expanded: int = 0
    candidates: int = 0
    declined: Counter = field(default_factory=Counter)
    declined_at: dict[str, str] = field(default_factory=dict)
    """One rewrite declined for each reason of ``declined``, the first met: its rule's id (a PET mutant's name)
    and the node it matched, so a report can show what each reason stopped, not only how often."""
    regions: int = 1
    seconds: float = 0.0
    timed_out: bool = False
    """Whether the time limit stopped the search before its work was done: then, and only then, the result
    depends on the machine's speed."""
    steps: tuple[Step, ...] = ()
    """The rewrites from the input to ``graph``, in order."""
    replayed: int = 0
    """Regions rewritten by replaying the steps of a region of the same form instead of a search."""
    nearest: tuple[float, str] | None = None
    """The rewrite of the starting graph that came closest to paying without doing so: (how much it adds to the
    cost, its name). What a user wants to know when nothing was applied."""

    def decline(self, why: str, example: str) -> None:
        """Count a rewrite declined for ``why``; the first of each reason is its example."""
        self.declined[why] += 1
        self.declined_at.setdefault(why, example)

    def add_declines(self, other: SearchResult) -> None:
        self.declined.update(other.declined)
        for why, example in other.declined_at.items():
            self.declined_at.setdefault(why, example)

    def note_miss(self, added: float, name: str) -> None:
        if added >= 0 and (self.nearest is None or added < self.nearest[0]):
            self.nearest = (added, name)


def search(
    g: Graph,
    rules: Sequence[Rule] | RuleIndex,
    cost: Cost,
    alpha: float = 1.05,
    budget: int = BUDGET,
    time_limit: float = 10.0,
    mutate: Mutate | None = None,
    clock: Clock = time.perf_counter,
    lookahead: bool = True,
    outside: Sequence[Node] = (),
    work: int | None = None,
    prefetch: Prefetch | None = None,
    candidates: int | None = None,
) -> SearchResult:
    """The cheapest graph found from ``g`` (``rules`` as given: pass `both_directions` for equalities; a
    `RuleIndex` of them when searching many graphs with one rule set), with ``mutate``'s rewrites as further
    candidates of every graph expanded. ``g`` may be a region of a larger graph: ``outside`` stands for the
    paths through the rest of it (`outside_links`), and a rewrite that would close a cycle with them is
    declined. A pass that spends its ``budget`` having found a cheaper graph is
    followed by another from that graph, with a fresh budget, while ``work`` is left (graphs to expand in all;
    `PASSES` budgets if not given): with alpha's slack the queue fills with near-equal variants (SqueezeNet:
    every subset of its eight fire modules enlarged), and one budget reached four to eight of the eight fire
    merges under noisy unit costs (bench_perturb.py, sigma 0.4). The search also ends once it has costed
    ``candidates`` graphs (no bound if None), mid-pass if need be: the work that its time follows.
    ``time_limit``, in ``clock``'s seconds, is a safety net (`SearchResult.timed_out`). ``prefetch`` hears each
    expansion's candidates before they are costed."""
    t0 = clock()
    left = PASSES * budget if work is None else work
    costed = float("inf") if candidates is None else candidates
    index = rules if isinstance(rules, RuleIndex) else RuleIndex(rules)
    allowed = min(budget, left)
    result = _search_pass(
        g, index, cost, alpha, allowed, time_limit, mutate, clock, lookahead, outside, prefetch, costed
    )
    last, left, costed = result, left - result.expanded, costed - result.candidates
    while (
        last.expanded >= allowed
        and _cheaper(last.cost_after, last.cost_before)
        and left > 0
        and costed > 0
        and not last.timed_out
    ):
        allowed = min(budget, left)
        time_left = time_limit - (clock() - t0)
        last = _search_pass(
            result.graph, index, cost, alpha, allowed, time_left, mutate, clock, lookahead, outside, prefetch, costed
        )
        left, costed = left - last.expanded, costed - last.candidates
        result.timed_out = last.timed_out
        result.graph, result.cost_after = last.graph, last.cost_after
        result.steps += last.steps
        result.applied.update(last.applied)
        result.add_declines(last)
        result.expanded += last.expanded
        result.candidates += last.candidates
    result.seconds = clock() - t0
    return result


def _search_pass(
    g: Graph,
    index: RuleIndex,
    cost: Cost,
    alpha: float,
    budget: int,
    time_limit: float,
    mutate: Mutate | None,
    clock: Clock,
    lookahead: bool = True,
    outside: Sequence[Node] = (),
    prefetch: Prefetch | None = None,
    candidates: float = float("inf"),
) -> SearchResult:
    """One best-first search from ``g``: TASO's queue by cost, candidates within ``alpha`` of the best kept,
    until ``budget`` graphs are expanded or ``candidates`` costed. With ``lookahead``, a rewrite that does not pay
    is also tried with each rewrite it opens (`_repaid`). The candidates of an expansion are made first and
    handed to ``prefetch``, then costed in turn."""
    t0 = clock()
    start_cost = cost(g)
    best, best_cost, best_history = g, start_cost, ()
    tick = itertools.count()
    queue: list = [(start_cost, next(tick), g, (), None)]
    seen = {g.structure}
    matches: dict[int, list] = {}  # id(graph) -> its matches, kept for the graphs rewritten from it
    folds: Folds = {}  # the same weights are folded again in every graph that keeps a match
    result = SearchResult(g, start_cost, start_cost)
    max_nodes = 2 * len(g.nodes)
    opened = Opened(index)
    opens = Opens(opened)
    unfit: Unfits = {}  # matches declined for their own shapes, for every graph of the pass that keeps them

    def consider(new: Graph, c: float, steps: tuple[Step, ...], parent: Graph) -> None:
        nonlocal best, best_cost, best_history
        result.candidates += 1
        if c < alpha * best_cost and len(new.nodes) < max_nodes:  # judged against the best before it
            heapq.heappush(queue, (c, next(tick), new, steps, parent))
        if _cheaper(c, best_cost):
            best, best_cost, best_history = new, c, steps

    while queue and result.expanded < budget and result.candidates < candidates and not result.timed_out:
        if clock() - t0 >= time_limit:
            result.timed_out = True
            break
        current_cost, _, current, history, parent = heapq.heappop(queue)
        result.expanded += 1
        if parent is None:
            found = all_matches(current, index)
        else:
            found = surviving(current, matches[id(parent)]) + opened(current, parent)  # `matches_after`, shared
        matches[id(current)] = found
        fresh = {}  # by structure: a graph two rewrites reach is one candidate
        for name, new, match in _rewrites(current, found, folds, mutate, result, outside, unfit):
            if new.structure not in seen:
                fresh.setdefault(new.structure, (name, new, match))
        if prefetch is not None:
            prefetch([new for _, new, _ in fresh.values()])
        for name, new, match in fresh.values():
            if new.structure in seen:  # reached meanwhile as the second rewrite of a pair (`_repaid`)
                continue
            seen.add(new.structure)
            c = cost(new)
            if not history:
                result.note_miss(c - start_cost, name)
            if (
                match is not None
                and not _cheaper(c, current_cost)
                and grows(match.rule)
                and not opens(new, current, match)
            ):
                result.decline(DEAD_END, _at(match))  # costed, but neither a candidate nor queued: it leads nowhere
                continue
            steps = (*history, Step(name, match, current))
            consider(new, c, steps, current)
            if lookahead and match is not None and current_cost <= c < alpha * best_cost:
                pairs = _repaid(new, current, current_cost, opened, found, cost, folds, seen, result, outside, unfit)
                for pair in pairs:
                    matches[id(new)] = pair.matches  # for expanding the pair's graph: its parent is ``new``
                    consider(pair.graph, pair.cost, (*steps, Step(pair.name, pair.match, new)), new)
            if clock() - t0 >= time_limit:
                result.timed_out = True
                break
            if result.candidates >= candidates:
                break
    result.graph, result.cost_after = best, best_cost
    result.steps = best_history
    result.applied = Counter(step.match.rule.id if step.match else step.name for step in best_history)
    result.seconds = clock() - t0
    return result


@dataclass(frozen=True)
class _Pair:
    """The second rewrite of a pair that pays (`_repaid`): the graph after both, its cost, and the second step."""

    graph: Graph
    cost: float
    name: str
    match: Match
    matches: list[Match]
    """Every match in the graph between the two rewrites (its `matches_after`)."""


def _repaid(
    new: Graph,
    current: Graph,
    current_cost: float,
    opened: Opened,
    found: list[Match],
    cost: Cost,
    folds: Folds,
    seen: set,
    result: SearchResult,
    outside: Sequence[Node],
    unfit: Unfits,
) -> Iterator[_Pair]:
    """Each rewrite that ``new`` (a rewrite of ``current`` that costs as much or more) opens, where the two
    together cost less than ``current``. A best-first queue reaches such a pair late: SqueezeNet's fire merge
    is an enlarge (a 1x1 conv padded to 3x3, +12 us) then a merge of the two convs (-54 us), and with float16
    unit costs of one H100 lease the queue spent its budget on combinations of eight cheaper Relu moves
    (+1.7 us each) and never expanded an enlarged graph: the merges, 1.33x measured, were not found. Only
    rules that shrink the graph (`Rule.shrinks`) are tried second: one that runs as many ops seldom repays,
    and matching every rule at every candidate made SqueezeNet's search 1.7x as long."""
    every: list[Match] | None = None
    shrinking = opened.shrinking(new, current)
    for name, after, match in _rewrites(new, shrinking, folds, None, result, outside, unfit):
        if after.structure in seen:
            continue
        c = cost(after)
        if _cheaper(c, current_cost):
            seen.add(after.structure)
            if every is None:  # the pair's graph is expanded from ``new``: it needs all of new's matches
                every = surviving(new, found) + opened(new, current)
            assert match is not None
            yield _Pair(after, c, name, match, every)


Unfits = dict[tuple, tuple[str, Match]]
"""Matches that did not fit (`Unfit`), by rule and matched nodes: why, and the match (which holds the nodes, so
their ids stay theirs)."""


def _rewrites(
    g: Graph,
    found: list,
    folds: Folds,
    mutate: Mutate | None,
    result: SearchResult,
    outside: Sequence[Node] = (),
    unfit: Unfits | None = None,
) -> Iterator[tuple[str, Graph, Match | None]]:
    """Each match applied (noting in ``result`` why a match was declined), then ``mutate``'s rewrites; none that
    would close a cycle with the ``outside`` paths. A match in ``unfit`` is declined again without being built:
    a pass's graphs share most of their matches, and EfficientFormer's search built the same ones that need a
    constant of a size the model does not fix over 10,000 times."""
    for m in found:
        if surely_cycles(g, m, outside):
            result.decline(CYCLE, _at(m))
            continue
        key = (id(m.rule), tuple(id(n) for n in m.nodes.values()))
        if unfit is not None and key in unfit:
            result.decline(unfit[key][0], _at(m))
            continue
        try:
            new = apply(g, m, folds)
        except Declined as e:
            if unfit is not None and isinstance(e, Unfit):
                unfit[key] = (str(e).split(":")[0], m)
            result.decline(str(e).split(":")[0], _at(m))
            continue
        if closes_cycle(new, outside):
            result.decline(CYCLE, _at(m))
        else:
            yield m.rule.name, new, m
    for name, new in mutate(g) if mutate is not None else ():
        if closes_cycle(new, outside):
            result.decline(CYCLE, name)
        else:
            yield name, new, None


def _at(m: Match) -> str:
    """A match as a report names it: its rule's id (`subst rules show ID`) and the first model node it binds."""
    return f"{m.rule.id} at {_node(m.nodes[min(m.nodes)])}"


def _node(n: Node) -> str:
    return f"{n.op} {n.name!r}" if n.name else f"a {n.op}"


def replay(g: Graph, steps: Sequence[Step]) -> Graph | None:
    """``g`` rewritten by ``steps`` found for a graph of the same form: each step's match carried over to the
    value in its place (`correspondence`), with ``g``'s own weights folded. None where a step does not carry
    over (a PET mutant, a match with no counterpart, a rewrite declined here)."""
    folds: Folds = {}
    for step in steps:
        place = correspondence(step.before, g) if step.match is not None else None
        if step.match is None or place is None:
            return None
        want = {rv: place[mv] for rv, mv in step.match.values.items()}
        m = next((m for m in find_matches(g, step.match.rule) if m.values == want), None)
        if m is None:
            return None
        try:
            g = apply(g, m, folds)
        except Declined:
            return None
    return g


def _replayed(region: Graph, twin: SearchResult, cost: Cost, outside: Sequence[Node]) -> SearchResult | None:
    """``region`` rewritten as its twin was, if that carries over, closes no cycle with the ``outside`` paths
    and costs no more than the region."""
    before = cost(region)
    new = replay(region, twin.steps)
    if new is None or closes_cycle(new, outside):
        return None
    after = cost(new) if new is not region else before
    if after > before:
        return None
    return SearchResult(new, before, after, Counter(twin.applied), replayed=1)


def searched_parts(g: Graph, index: RuleIndex, context_ops: frozenset[str] = frozenset()) -> list[list[Node]]:
    """The disjoint parts of ``g`` that `optimize_graph` searches: each region of nodes some rule mentions
    (`regions`), with its context (`with_context`). No rewrite of the search touches a node outside them, so the
    cost model need not measure what only such nodes make (`taso.cost.CostModel.untouched`)."""
    rule_ops = {n.op for r in index.rules for n in r.src.nodes}
    return disjoint([with_context(g, p, context_ops) for p in regions(g, rule_ops)])


def optimize_graph(
    g: Graph,
    rules: Sequence[Rule] | RuleIndex,
    cost: Cost,
    alpha: float = 1.05,
    budget: int = BUDGET,
    time_limit: float = 10.0,
    progress: Callable[[int, int], None] | None = None,
    context_ops: frozenset[str] = frozenset(),
    mutate: Mutate | None = None,
    max_nodes: int = MAX_REGION,
    clock: Clock = time.perf_counter,
    prefetch: Prefetch | None = None,
    candidates: int | None = None,
) -> SearchResult:
    """Search every region of ``g`` (with its ``context_ops`` consumers, see `with_context`; cut into
    `windows` of ``max_nodes``) and splice the results. The work, `PASSES` budgets for each form of region, is
    shared out: each form still to search gets a part of the work left in proportion to its nodes, so a small
    region cannot take as much as a large (SqueezeNet with the CLI's 10 s when the share was of seconds: an
    equal half for its fire modules' region stopped the search at a predicted 0.849 where it reaches 0.678),
    a region that will be replayed takes no share (NasRNN: five steps of one form, so the first gets it all),
    and work one region leaves goes to the rest. The candidates costed are bounded over the whole search
    (`CANDIDATES` unless ``candidates`` says otherwise), not shared: a search within the bound is as without
    it. ``time_limit`` is a safety net for the whole search: a region it stops is `SearchResult.timed_out`.
    A region's result is kept only if the whole graph costs less with it: a region is costed apart from the
    units it borders (BERT-tiny on the CPU: a region without its GELU's pass-through Div and Erf predicted
    -0.0035 ms for rewrites that cost +0.0022 ms in the whole graph, which then kept none of its regions').
    ``clock`` is the time the limit is in: `taso.optimize` leaves out the seconds spent measuring; ``prefetch``
    hears each expansion's candidates before they are costed (`search`)."""
    t0 = clock()
    index = rules if isinstance(rules, RuleIndex) else RuleIndex(rules)  # once for all regions
    parts = searched_parts(g, index, context_ops)
    pieces = [(w, len(p) > max_nodes) for p in parts for w in windows(g, p, max_nodes, context_ops)]
    forms = [extract(g, nodes).form for nodes, _ in pieces]  # as in g; a window's may change as it goes
    total = SearchResult(g, 0.0, 0.0, regions=len(pieces))
    work = PASSES * budget * len(set(forms))
    max_candidates = CANDIDATES if candidates is None else candidates
    searched: dict[str, SearchResult] = {}  # form -> the search of the first region of that form
    current, whole = g, cost(g)
    if progress is not None:
        progress(0, len(pieces))
    for k, (nodes, windowed) in enumerate(pieces):
        pending = {forms[k]: len(nodes)}  # this region, then each form still to search -> its first region's nodes
        for form, (piece, _) in zip(forms[k + 1 :], pieces[k + 1 :]):
            if form not in searched:
                pending.setdefault(form, len(piece))
        share = max(work - total.expanded, 0) * pending[forms[k]] // sum(pending.values())
        alive = {id(n) for n in current.nodes}  # a splice drops the nodes no output reads, a dead branch's too
        nodes = [n for n in nodes if id(n) in alive]
        if windowed and nodes:  # a window's context may have been rewritten by the window before it
            nodes = with_context(current, nodes, context_ops)
        if nodes:
            region = extract(current, nodes)
            outside = outside_links(current, region)
            twin = searched.get(region.form)
            r = _replayed(region, twin, cost, outside) if twin is not None else None
            if r is None:
                time_left = time_limit - (clock() - t0)
                r = searched[region.form] = search(
                    region,
                    index,
                    cost,
                    alpha,
                    budget,
                    time_left,
                    mutate,
                    clock,
                    outside=outside,
                    work=share,
                    prefetch=prefetch,
                    candidates=max(max_candidates - total.candidates, 0),
                )
            if r.graph is not region:
                spliced = splice(current, region, r.graph)
                if spliced is not None and _cheaper(after := cost(spliced), whole):
                    current, whole = spliced, after
                else:  # a region is costed apart from the units it borders: the whole graph decides
                    why = CYCLE if spliced is None else "no cheaper in the whole graph"
                    total.decline(why, f"{', '.join(sorted(r.applied))} at {_node(nodes[0])}")
                    searched[region.form] = SearchResult(region, r.cost_before, r.cost_before)
                    r = replace(r, graph=region, cost_after=r.cost_before, applied=Counter())
            total.replayed += r.replayed
            total.cost_before += r.cost_before
            total.cost_after += r.cost_after
            total.expanded += r.expanded
            total.candidates += r.candidates
            total.timed_out |= r.timed_out
            total.applied.update(r.applied)
            total.add_declines(r)
            if r.nearest is not None:
                total.note_miss(*r.nearest)
        if progress is not None:
            progress(k + 1, len(pieces))
    total.graph = current
    total.seconds = clock() - t0
    return total
