"""The online detector of `ddpdoctor run --watch` (capture/agent/watch_detect.py) on step times built in code:
noise, a step change, single spikes, the warm-up, the re-learn after an incident."""

import random

from ddpdoctor.capture.agent.watch_detect import DetectorConfig, StepDetector, robust_baseline


def feed(det, times, start=0):
    """The step at which the first alarm rose, or None."""
    for i, t in enumerate(times):
        alarm = det.add(start + i, t)
        if alarm is not None:
            return start + i, alarm
    return None


def noisy(n, median=0.015, rel=0.15, seed=0):
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-rel, rel)) for _ in range(n)]


def test_noise_alone_never_raises():
    for seed in range(20):
        assert feed(StepDetector(), noisy(2000, seed=seed)) is None


def test_heavy_tailed_noise_of_a_shared_host_never_raises():
    """Most steps near 15 ms, one in seven up to 2x (another process took the core for a while)."""
    rng = random.Random(3)
    times = [
        0.015 * (1 + rng.uniform(0, 1.0)) if rng.random() < 1 / 7 else 0.015 * rng.uniform(0.9, 1.1)
        for _ in range(3000)
    ]
    assert feed(StepDetector(), times) is None


def test_a_step_change_raises_within_a_few_steps_of_it():
    times = noisy(150) + noisy(100, median=0.040, seed=1)
    # the window: 10 steps, whatever their length; the level alarm alone (pauses off)
    hit = feed(StepDetector(DetectorConfig(window_s=0, pause_margin=100)), times)
    assert hit is not None
    step, alarm = hit
    assert 150 + 3 <= step <= 150 + 7  # the median of the last 10 moves with the 5th slow step or so
    assert 1.3 < alarm.ratio < 3.2  # the window median when it crossed the line
    assert abs(alarm.baseline.median_s - 0.015) < 0.002


def test_single_spikes_never_raise():
    times = noisy(1000)
    for i in range(80, 1000, 140):  # a 10x spike every 140 steps (2.1 s): one in any window
        times[i] = 0.15
    assert feed(StepDetector(), times) is None


def test_periodic_pauses_that_leave_the_median_alone_raise_a_pauses_alarm():
    """A collector's pause of 250 ms every 10 steps of 15 ms: the median stays, the job runs 2.5x slower."""
    times = noisy(150) + [0.25 if i % 10 == 0 else t for i, t in enumerate(noisy(300, seed=9))]
    hit = feed(StepDetector(), times)
    assert hit is not None and hit[1].how == "pauses" and hit[1].ratio > 1.5
    assert hit[0] < 150 + 60
    assert 150 <= hit[1].onset <= 160


def test_a_step_change_caught_by_the_mean_first_still_names_its_onset_not_a_stray_slow_step():
    times = noisy(150)
    times[110] = 0.1  # a stray slow step 40 steps before the change
    hit = feed(StepDetector(), times + noisy(300, median=0.045, seed=10))
    assert hit is not None and 150 <= hit[1].onset <= 152


def test_a_short_burst_below_the_count_does_not_raise():
    times = noisy(200)
    times[120:127] = [0.05] * 7  # 7 slow steps in a row: fewer than 8 of 10
    assert feed(StepDetector(), times) is None


def test_a_change_of_less_than_the_margin_does_not_raise():
    times = noisy(150, rel=0.02) + noisy(300, median=0.015 * 1.2, rel=0.02, seed=2)
    assert feed(StepDetector(), times) is None


def test_a_slow_warm_up_is_never_looked_at():
    """Compilation and the allocator's growth: the first steps 10x slower, then steady."""
    times = [0.2] * 15 + noisy(400)
    assert feed(StepDetector(DetectorConfig(warmup=20)), times) is None


def test_warm_up_longer_than_the_detector_s_skip_is_learned_into_the_baseline_not_flagged():
    """A warm-up that outlasts the skip makes a high baseline: the job's normal steps are faster, no alarm."""
    times = [0.05] * 40 + noisy(400)
    assert feed(StepDetector(DetectorConfig(warmup=20)), times) is None


def test_after_relearn_the_new_level_is_normal():
    det = StepDetector()
    times = noisy(150) + noisy(300, median=0.04, seed=4)
    step, _alarm = feed(det, times)
    det.relearn(skip=30)
    assert det.baseline is None
    assert feed(det, times[step + 1 :], start=step + 1) is None
    assert det.baseline is not None and abs(det.baseline.median_s - 0.04) < 0.004


def test_baseline_follows_a_slow_drift_without_alarm():
    times = [0.015 * (1 + 0.3 * i / 3000) for i in range(3000)]  # +30 % over the run, slowly
    assert feed(StepDetector(), noisy(100) + times) is None


def test_robust_spread_ignores_outliers_and_has_a_floor():
    b = robust_baseline([0.010] * 30 + [1.0] * 5, 35, floor=0.03)
    assert b.median_s == 0.010
    assert abs(b.spread_s - 0.0003) < 1e-9  # MAD is 0: the floor (3 % of the median)


def test_the_alarm_window_is_at_least_two_seconds_of_steps():
    """15 ms steps: the window is the last 2 s; a 0.9 s burst at 2x does not raise, a lasting 2x does once more
    than half of the window's steps are slow."""
    det = StepDetector()
    burst = noisy(150) + noisy(30, median=0.030, seed=5) + noisy(300, seed=6)
    assert feed(det, burst) is None
    assert 125 <= det.window_n <= 145  # 2 s of 15 ms steps
    hit = feed(StepDetector(), noisy(150) + noisy(300, median=0.030, seed=7))
    assert hit is not None and 150 + 40 <= hit[0] <= 150 + 50  # k slow > (2 s - 0.03 k) / 0.015: k = 45
    assert hit[1].onset == 150 and hit[1].how == "level"


def test_the_onset_is_where_the_change_began_not_a_stray_slow_step_before_it():
    times = noisy(150)
    times[110] = times[112] = 0.1  # noise well before the change, inside the alarm window
    hit = feed(StepDetector(), times + noisy(300, median=0.030, seed=8))
    assert hit is not None and hit[1].onset == 150


def test_slow_steps_have_a_window_of_ten():
    det = StepDetector()
    assert feed(det, noisy(80, median=1.0)) is None
    assert det.window_n == 10
