#!/usr/bin/python3
"""Unit test of run_e2e.py's matching and comparison, on synthetic records (no root, no
servers): every assertion the harness makes must catch the error it is for, and a faithful
tokenscope report of the same requests must pass.

Usage: tests/e2e/test_compare.py [-v]; prints PASS or FAIL per test, exits 1 on a failure.
"""
import copy
import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run_e2e  # noqa: E402

MS = 1_000_000
TOL = run_e2e.TOLERANCE_NS


def client(id_, port, seq, outcome="ok", send=0, tokens=4, status=200, stream=True):
    """A gtclient record: tokens content frames 5 ms apart after a 20 ms TTFT."""
    token_ns = [send + 20 * MS + i * 5 * MS for i in range(tokens)]
    first = token_ns[0] if token_ns else None
    end = (token_ns[-1] if token_ns else send) + MS
    return {"id": id_, "port": port, "seq": seq, "status": status, "outcome": outcome,
            "stream": stream, "send_start_ns": send - 20_000, "send_ns": send, "first_token_ns": first, "end_ns": end,
            "ttft_ms": (first - send) / MS if first is not None else None,
            "e2e_ms": (end - send) / MS, "frames": tokens, "tokens": tokens,
            "tokens_from": "usage" if outcome == "ok" else "frames", "token_ns": token_ns}


def observed(c, conn_id=1, early_ns=50_000):
    """What a correct tokenscope reports for client record c: the request reached the server's
    socket early_ns / 2 after the client sent it, the server read it early_ns after, and wrote
    every frame early_ns before the client read it."""
    arrival = c["send_ns"] + early_ns
    received = c["send_ns"] + early_ns // 2
    token_ns = [t - early_ns for t in c["token_ns"]]
    first = token_ns[0] if token_ns else None
    end = c["end_ns"] - early_ns
    return {"pid": 1, "conn": f"127.0.0.1:8000<-127.0.0.1:{c['port']}#{conn_id}",
            "status": c["status"], "outcome": c["outcome"], "arrival_ns": arrival,
            "received_ns": received, "socket_wait_ms": (arrival - received) / MS,
            "first_token_ns": first, "end_ns": end,
            "ttft_ms": (first - arrival) / MS if first is not None else None,
            "e2e_ms": (end - arrival) / MS, "tokens": c["tokens"], "frames": c["frames"],
            "tokens_from": c["tokens_from"], "token_ns": token_ns}


def workload():
    """Two keep-alive connections, one with an abort and an HTTP error."""
    gt = [client(0, 5000, 0, send=0), client(1, 5001, 0, send=MS),
          client(2, 5000, 1, "aborted", send=100 * MS, tokens=2),
          client(3, 5001, 1, "http_error", send=101 * MS, tokens=0, status=500)]
    got = [observed(c, conn_id=1 + c["port"] - 5000) for c in gt]
    # The server wrote a frame the aborting client never read.
    got[2]["token_ns"].append(got[2]["token_ns"][-1] + 5 * MS)
    return gt, got


def check(gt, got):
    return run_e2e.compare(gt, got, TOL, verbose=False)


class Compare(unittest.TestCase):
    def assertOne(self, gt, got, text, timing):
        errors = check(gt, got)
        self.assertTrue(errors, "mismatch not detected")
        self.assertTrue(any(text in e for e in errors), f"{text!r} not in {errors}")
        self.assertEqual(all(e.timing for e in errors), timing, errors)

    def test_faithful_report_passes(self):
        gt, got = workload()
        self.assertEqual(check(gt, got), [])

    def test_order_of_lines_does_not_matter(self):
        gt, got = workload()
        self.assertEqual(check(gt[::-1], got[::-1]), [])

    def test_missing_request(self):
        gt, got = workload()
        self.assertOne(gt, got[:-1], "tokenscope reported 3 requests", False)

    def test_extra_request(self):
        gt, got = workload()
        extra = observed(client(9, 5002, 0, send=200 * MS))
        self.assertOne(gt, got + [extra], "port 5002: client made 0 requests", False)

    def test_outcome(self):
        gt, got = workload()
        got[2]["outcome"] = "ok"
        self.assertOne(gt, got, "outcome ok != client aborted", False)

    def test_client_timeout_is_a_harness_failure(self):
        gt, got = workload()
        gt[0]["outcome"] = "timeout"
        self.assertOne(gt, got, "client outcome timeout", False)

    def test_status(self):
        gt, got = workload()
        got[3]["status"] = 200
        self.assertOne(gt, got, "status 200 != client 500", False)

    def test_tokens_and_frames(self):
        for key, value in (("tokens", 3), ("frames", 5), ("tokens_from", "frames")):
            gt, got = workload()
            got[0][key] = value
            self.assertOne(gt, got, f"{key} {value} != client", False)

    def test_arrival_before_send(self):
        gt, got = workload()
        got[1]["arrival_ns"] = gt[1]["send_start_ns"] - 1
        self.assertOne(gt, got, "arrival_ns", False)

    def test_first_token_after_client_read_it(self):
        gt, got = workload()
        got[0]["first_token_ns"] = gt[0]["first_token_ns"] + 1
        self.assertOne(gt, got, "after client's", False)

    def test_token_after_client_read_it(self):
        gt, got = workload()
        got[0]["token_ns"][2] = gt[0]["token_ns"][2] + 1
        self.assertOne(gt, got, "token_ns[2]", False)

    def test_token_too_early_is_timing(self):
        gt, got = workload()
        got[0]["token_ns"][3] = gt[0]["token_ns"][3] - TOL - 1
        self.assertOne(gt, got, "token_ns[3]", True)

    def test_token_count(self):
        gt, got = workload()
        got[0]["token_ns"].pop()
        self.assertOne(gt, got, "3 token times != client 4", False)

    def test_aborted_needs_every_token_the_client_read(self):
        gt, got = workload()
        got[2]["token_ns"] = got[2]["token_ns"][:1]
        self.assertOne(gt, got, "1 token times < the 2", False)

    def test_ttft(self):
        gt, got = workload()
        # The first frame written 2.5 ms before the client's TTFT says, ttft_ms consistent.
        got[1]["first_token_ns"] -= 2.5 * MS
        got[1]["ttft_ms"] -= 2.5
        self.assertOne(gt, got, "vs client ttft_ms", True)

    def test_first_token_missing(self):
        gt, got = workload()
        got[0]["first_token_ns"] = None
        self.assertOne(gt, got, "first_token_ns None", False)

    def test_e2e(self):
        gt, got = workload()
        got[0]["end_ns"] -= 3 * MS
        got[0]["e2e_ms"] -= 3
        self.assertOne(gt, got, "vs client e2e_ms", True)

    def test_e2e_inconsistent_with_end(self):
        gt, got = workload()
        got[0]["e2e_ms"] -= 3
        self.assertOne(gt, got, "e2e_ms", False)

    def test_within_tolerance_passes(self):
        gt, got = workload()
        got[0]["token_ns"][1] = gt[0]["token_ns"][1] - TOL
        got[1]["first_token_ns"] -= 1.9 * MS
        got[1]["ttft_ms"] -= 1.9
        self.assertEqual(check(gt, got), [])

    def test_measures_counted(self):
        # received, TTFT, 4 tokens, E2E twice; received, TTFT and 2 tokens of the abort (no
        # E2E); received and E2E of the HTTP error.
        gt, got = workload()
        self.assertEqual(check(gt, got).measures, 7 + 7 + 4 + 2)

    def test_one_stalled_measure_is_within_budget(self):
        gt, got = workload()
        got[0]["token_ns"][1] = gt[0]["token_ns"][1] - TOL - 3 * MS
        errors = check(gt, got)
        self.assertEqual(len(errors), 1)
        ok, note = run_e2e.within_budget(errors)
        self.assertTrue(ok, note)
        self.assertIn("1 of 20 timing measures", note)

    def test_shifted_tokens_are_over_budget(self):
        # Every token time of a request taken 3 ms early (its neighbour frame's time, say)
        # is no stall, even though each is only a timing bound.
        gt, got = workload()
        got[0]["token_ns"] = [t - TOL - MS for t in gt[0]["token_ns"]]
        errors = check(gt, got)
        self.assertTrue(all(e.timing for e in errors))
        self.assertEqual(sum(e.count for e in errors), 4)
        self.assertFalse(run_e2e.within_budget(errors)[0])

    def test_far_outlier_is_over_budget(self):
        gt, got = workload()
        got[0]["token_ns"][1] = gt[0]["token_ns"][1] - run_e2e.OUTLIER_MAX_NS
        errors = check(gt, got)
        self.assertEqual(len(errors), 1)
        self.assertFalse(run_e2e.within_budget(errors)[0])

    def test_structural_mismatch_is_never_within_budget(self):
        gt, got = workload()
        got[2]["outcome"] = "ok"
        self.assertFalse(run_e2e.within_budget(check(gt, got))[0])

    def test_requests_on_a_port_pair_by_order(self):
        # Swapping the arrival times of two requests on one connection pairs them wrongly.
        gt, got = workload()
        got[0]["arrival_ns"], got[2]["arrival_ns"] = got[2]["arrival_ns"], got[0]["arrival_ns"]
        self.assertTrue(check(gt, got))

    def test_bad_conn(self):
        gt, got = workload()
        got[0] = copy.deepcopy(got[0])
        got[0]["conn"] = "garbage"
        self.assertOne(gt, got, "without a usable conn", False)

    def test_peer_port(self):
        self.assertEqual(run_e2e.peer_port("127.0.0.1:8000<-127.0.0.1:51234#7"), 51234)
        self.assertEqual(run_e2e.peer_port("[::1]:8000<-[::1]:40000#12"), 40000)


class Verdicts(unittest.TextTestResult):
    """A PASS or FAIL line per test, as every test program of the project prints."""
    def addSuccess(self, test):
        super().addSuccess(test)
        print(f"PASS {test._testMethodName}", flush=True)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        print(f"FAIL {test._testMethodName}: {err[1]}", flush=True)

    def addError(self, test, err):
        super().addError(test, err)
        print(f"FAIL {test._testMethodName}: {err[0].__name__}: {err[1]}", flush=True)


if __name__ == "__main__":
    unittest.main(testRunner=unittest.TextTestRunner(resultclass=Verdicts, verbosity=0))
