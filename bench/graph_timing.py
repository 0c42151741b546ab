"""CUDA-graph timing shared by the bench scripts (bench/README.md, "Graph")."""


def capture(torch, calls):
    """A CUDA graph that runs every call once, captured after the calls ran once on a side stream (allocator pools,
    lazy initialization, autotuning)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    return graph


def replay_ms(torch, graph, reps):
    """The ms of each of `reps` replays, each between its own pair of events, all enqueued before the first is waited
    for: while one replay runs the host enqueues the next, so no replay's time holds the host's launch of it (which
    otherwise counts whole where a replay is one call)."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in ev]
