from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.rules.comms import FirstFailingRank
from tests.diagnosis.diag_events import T0, ev, topology


def _book():
    book = JobBook()
    book.update(topology(n=4, gpus=2))  # ranks 0-1 on n000, 2-3 on n001, ...
    return book


def _timeout(ts, rank, seq):
    node = f"n{rank // 2:03d}"
    return ev(ts, node, "nccl", "nccl_timeout", rank=rank, seq=seq, op="ALLREDUCE", timeout_ms=120000, elapsed_ms=120004,
              fault="nccl_error", action="reattempt", severity="error")


def test_lowest_seqnum_is_blamed_not_every_rank_that_timed_out():
    det = FirstFailingRank(_book(), collect_s=30)
    for r in range(8):
        if r != 5:
            assert det.observe(_timeout(100 + r * 0.1, r, 812)) == []
    det.observe(_timeout(101, 5, 811))  # rank 5 is one collective behind: it failed first
    assert det.tick(T0 + 110) == []
    [f] = det.tick(T0 + 131)
    assert (f.fault, f.nodes, f.ranks, f.action) == ("nccl_error", ("n002",), (5,), "reattempt")
    assert abs(f.onset - (T0 + 100 - 120.004)) < 1e-6 and "7 other rank(s) only waited" in f.detail
    assert f.ts == T0 + 131  # decided when the collection window closed


def test_hard_error_beats_timeouts():
    det = FirstFailingRank(_book(), collect_s=30)
    for r in range(8):
        det.observe(_timeout(100 + r, r, 812))
    det.observe(ev(104.5, "n003", "nccl", "nccl_error", rank=6, error="ncclRemoteError: remote process exited"))
    det.observe(ev(106.5, "n001", "nccl", "nccl_error", rank=3, error="ncclSystemError"))
    [f] = det.flush()
    assert f.ranks == (6,) and f.nodes == ("n003",) and "ncclRemoteError" in f.detail


def test_reports_after_the_decision_are_echoes_until_the_job_restarts():
    det = FirstFailingRank(_book(), collect_s=30)
    [f] = det.observe(ev(100, "n003", "nccl", "nccl_error", rank=6, error="ncclRemoteError"))
    assert f.ts == T0 + 100  # a hard error is decided at once
    for r in range(8):
        assert det.observe(_timeout(220 + r, r, 900)) == []
    assert det.flush() == []
    det.restarted("job-t")
    det.observe(_timeout(400, 1, 10))
    [g] = det.flush()
    assert g.ranks == (1,)


def test_everyone_stuck_at_the_same_collective_blames_nobody():
    det = FirstFailingRank(_book(), collect_s=30)
    for r in range(8):
        det.observe(_timeout(100 + r * 0.1, r, 812))
    assert det.flush() == []


def test_nccls_misuse_result_keeps_the_programs_class():
    # NCCL's misuse results are the program's (docs/design.md §9): the parser says user_code, rollback; the
    # incident it opens keeps that class, the peers' timeouts after it fold in as before, nobody is reattempted
    det = FirstFailingRank(_book(), collect_s=30)
    [f] = det.observe(ev(100, "n001", "nccl", "nccl_error", rank=2, error="NCCL error in: NCCLUtils.hpp:275, invalid usage",
                         fault="user_code", action="rollback", severity="error"))
    assert (f.fault, f.action, f.ranks) == ("user_code", "rollback", (2,)) and "used it wrongly" in f.detail
    for r in range(8):
        assert det.observe(_timeout(130 + r, r, 5)) == []
    # a collective's own error keeps the collective's class
    det2 = FirstFailingRank(_book(), collect_s=30)
    [g] = det2.observe(ev(100, "n003", "nccl", "nccl_error", rank=6, error="ncclRemoteError", fault="nccl_error",
                          action="reattempt", severity="error"))
    assert (g.fault, g.action) == ("nccl_error", "reattempt")
