"""``perceptlab forecast`` replayed: forecast from a study's first votes (or ratings) against what the whole study
needed.

Each study is simulated in full with a known crowd (``analysis/simulate.py``: Thurstone Case V observers,
25 % random and 5 % left clickers, worker activity varying). Its *actual* need is found by analysing its
prefixes (file order) as ``perceptlab analyze`` does (automatic screening, MLE with anchors, worker
bootstrap, 95 % t interval; 200 resamples) at checkpoints 15 % apart, until the ``q``-quantile of the items'
half-widths (JOD) reaches the target, interpolated log-log between checkpoints. The target is set a little
above what the whole study reached at the 90 % quantile, so that the study reaches it. The *forecast* sees only
the first ``--pilot-share`` of the votes (``analysis/forecast.py``: fit, then simulated studies continuing the
pilot), and the planned votes per worker (a prefix has seen only each worker's first votes). "model only" is
the forecast without the pilot's inconsistency factor. Votes count the pilot's; cost follows from votes by the same pay rules (20 trials per page, 2 of them
gold, $1.50 reward covering 1 page, $1.00 per further page, pages per worker from the pilot).

Studies: StudyMB-sized (8 sets x 155 items, 6-regular design, 20 votes per pair, 300 workers), a small one
(3 x 40 items, 120 workers) and an actively sampled one (3 x 40 items: a 1-vote warm-up of a 4-regular
design, then batches of ``analysis.active.plan_batch``, by the forecast's own simulator with the true crowd).
No recorded votes ship with the repository, so there is no real study among them.

The rating study (``--only rating``; ``analysis/rating_forecast.py``): 3 scenes x 40 stimuli rated 1..5 by 400
workers (P.913 raters, bias SD 0.35, inconsistency RMS 0.70 log-normal, rounded and clipped; 25 % careless
ones answering uniformly; 10-40 ratings each), least-rated first, simulated in full
(``analysis.rating_forecast.simulate_whole_study``). Its need is read off its prefixes' MOS t half-widths as a
rating study's ``[stopping]`` measures them (every rating, the ``ceil(q n)``-th narrowest stimulus), the
target 1.05 times the widest stimulus' half-width at the end, so that the whole study reaches it; the forecast
sees its first 15 % (about 1,450 ratings), 20 replicates in the figures below (``--rating-replicates``, 200 since
issue 37 item 5). Pay: a rating study's defaults (20 ratings a page, 2
of them checks, $0.90 and $0.60 a further page).

Measured (``.venv/bin/python benchmarks/forecast.py``: seed 0, 90 % of the items, 6 replicates with 100
resamples per checkpoint, on 2 cores shared with other work; 5 minutes): StudyMB 61,461 forecast (band
57,187-66,019) vs 68,453 needed, -10 %, outside its band (careless share fitted 0.31, 0.30 true); small 7,004
(6,562-7,810) vs 6,697, +5 % (0.35 fitted, 0.30 true); active 5,281 (5,079-6,388) vs 6,359, -17 %, inside its
band (0.26 fitted, 0.29 true; when the share came from repeated pairs and the screening: 0.17 fitted, 4,581
forecast, -28 %, outside its band). ``--seed 1 --only active``: 5,602 (3,936-7,106) vs 6,659, -16 %, inside
its band. Both came out low, but not for want of fitting: given the crowd's true scale, worker types and vote
counts in place of the fit (a one-off ablation), the forecast was 6,064 (-5 %) at seed 0 and 4,999 (-25 %) at
seed 1; a band of the 10th to 90th percentile of 6 replicates holds a further study only about 4 times in 7.
Dollars follow votes by the same rules, so their errors are the same.

Rating study (``--only rating --seed k``, k = 0..4; well under a second each): at the 90 % quantile 0 %, -3 %,
-2 %, +3 %, -9 % (seed 0: 7,229 forecast, band 6,753-7,736, vs 7,242 needed); at every stimulus -3 %, +6 %,
+11 %, +6 %, +4 % (seed 0: 8,983, band 8,421-9,587, vs 9,264). 9 of the 10 needs inside their band (seed 4's
90 % need, 7,998, above its 6,925-7,890). The fit at seed 0: careless share 0.25 (0.27 among the pilot's
workers), bias SD 0.37 (0.35), inconsistency RMS 0.65 (0.70); the pilot's half-widths over its simulated
replay's (the "inconsistency" column) 0.97-1.07.

The public NFLX ratings (``--only nflx --seed k``: tests/analysis/data/nflx_public_ratings.csv, 70 test sequences x
26 lab subjects; subjects added one by one in an order shuffled by the seed, the first 4, 15 %, the pilot; the
target 1.05 times the widest sequence's half-width with all 26; 20 replicates; a few seconds each). Before the
stimulus noise and the pilot bootstrap (seeds 0-2): -38 %, -37 %; -37 %, -32 %; -29 %, -40 % (90 % of the
sequences; all), 0 of 6 inside bands a few percent wide (seed 0: 801, band 791-918, vs 1,297 needed). After
(seeds 0-7): -32 %, +6 %; -39 %, +10 %; -25 %, +3 %; -42 %, +22 %; -1 %, +53 %; -14 %, +33 %; -15 %, +8 %; +11 %,
+63 %: 16 of 16 inside their band (seed 0: 888, band 536-2,853, vs 1,297), median error +5 %, median absolute
error 19 %. Much of that error is the pilot's own luck: the mean per-sequence rating variance of the first 4
subjects was 0.68-1.51 times that of all 26 over seeds 0-7 (0.68-0.74 at seeds 0-2, whose 90 % forecasts are
low), which no forecast from those 4 can know; the band says so. The simulated rating study after the change
(seeds 0-4): +8 %, +8 %; -1 %, +17 %; +7 %, +14 %; +11 %, +17 %; -6 %, +10 %: 7 of 10 inside their band (the
three outside are high: the forecast leans high for the noise of a pilot's variance). Over the 26 rating replays:
23 inside their band (88 %), median absolute error 12.5 %. The small paired study at seed 0 with the pilot
bootstrap of the inconsistency factor: 7,400 (band 6,564-9,632) vs 6,697, +10 %, inside (before: +5 %, band
6,562-7,810); StudyMB-sized 65,686 (band 55,519-70,657) vs 68,453, -4 %, inside (before: -10 %, outside;
30 minutes on the loaded machine); the active study is unchanged (the factor is not applied to active sampling).

Issue 37, several seeds per kind (the table after each run: needs inside their band, median error, median absolute
error, forecasts below the need; each need at quantiles 0.9 and 1; load average 10-14 on the 2 cores):

* ``--only rating nflx --seeds 8`` (30 s). Before: rating 13 of 16 inside (81 %), median +8 %, |8 %|, 4 low
  (every-stimulus forecasts +8 % to +17 %, seeds 1-3 outside, high); NFLX 16 of 16, median +4 %, |19 %|, 7 low
  (90 % forecasts -42 % to +11 %, 7 of 8 low; every-sequence ones +3 % to +63 %). Cause: each replicate refitted
  the crowd on a worker-resampled pilot, and a worker drawn twice rates the same stimuli twice alike. The
  stimuli's log-noise spread read 0.35-0.65 for a pilot's 0.10-0.25 (the simulated crowd's 0), with a lower
  location (the noisiest stimuli too noisy, the 90th percentile too quiet), and the workers' noise low: the
  4-subject NFLX pilots' simulated rating variance per sequence 0.25-0.53 for their own 0.35-0.77. Now the
  bootstrap refits the qualities only; the noise's uncertainty is the chi-square draw's and each stimulus'
  posterior's (``analysis/rating_forecast.py`` ``resampled_pilot_fit``): simulated variance 0.33-0.65. The band
  is the wider of the replicates' 10-90 % percentiles and the Student t prediction interval of one further
  study (``analysis.forecast.prediction_band``: six replicates' percentiles hold a seventh draw about 4 times in
  7). After: rating 16 of 16 (100 %), median -1 %, |5 %|, 8 low (seed 0: 90 % 7,455, band 6,878-8,546, vs
  7,242; every stimulus 9,646, 8,504-11,010, vs 9,264); NFLX 16 of 16, median +4 %, |20 %|, 7 low (seed 0: 911,
  523-2,621, vs 1,297, -30 %; 1,450, 821-3,478, vs 1,728, -16 %). The NFLX error is the 4-subject pilot's: its
  rating variance per sequence was 0.68-1.51 times all 26 subjects' over seeds 0-7 (0.68-0.74 at seeds 0-2,
  whose 90 % forecasts are -11 % to -30 %). ``--only nflx --seeds 8 --pilot-share 0.3`` (8 subjects): 16 of
  16 inside, median -0 %, |7 %|. A prior on each stimulus' noise rising toward mid-scale (the SOS hypothesis)
  was tried: its fitted slope was 0.2-0.4 on the simulated crowd, whose noise is constant, and NFLX moved
  neither way (|21 %|); left out.
* ``--only small --seeds 6`` and ``--only active --seeds 6`` (random and active paired studies; 1-2 minutes
  each replay). The paired model is unchanged; before (the replicates' percentiles as the band): small +10 %,
  -0 %, -8 %, -15 %, +59 %, +117 % (4 of 6 inside; seed 5's inconsistency factor 1.25, model alone +23 %),
  active -17 %, -16 %, -2 %, +31 %, -16 %, -7 % (3 of 6 inside; careless share fitted 0.13 and 0.17 at seeds 4
  and 5 where 0.30 were). Only the 90 % needs count: no whole study reached the target on every item. After
  (the prediction band; medians unchanged): small 5 of 6 inside (83 %), median +5 %, |13 %|, 3 low (seed 4:
  7,177, band 5,328-9,595, vs 4,517, +59 %, outside; the model alone +70 %); active
  4 of 6 (67 %), median -12 %, |16 %|, 5 low (seed 3: 8,747, 7,060-11,178, vs 6,674, +31 %; seed 4: 5,109,
  4,520-6,054, vs 6,093, -16 %: the careless share is the active fit's open problem). Applying the inconsistency
  factor to active sampling with both pilots resampled gave +3 %, -12 %, +11 % at seeds 0-2 but 178 % high in
  the smaller active study of tests/analysis/test_forecast.py (factors 0.71-1.95); left off.
* Why the active pilots' careless share came out low at seeds 4-5 (``analysis.forecast.scale_agreement`` on the
  1,080-vote pilots of ``--only active`` seeds 0-5; true shares 0.29, 0.32, 0.30, 0.31, 0.30, 0.29): fitted 0.26,
  0.34, 0.30, 0.35, 0.13, 0.17. The same worker mixture judged against the *true* scale: 0.26, 0.36, 0.34, 0.36,
  0.17, 0.23; against a scale fitted knowing every worker's type (seeds 0, 4, 5): 0.21, 0.12, 0.18. So the fit
  runs about 0.03 below what the pilot itself shows, and seed 4's pilot shows 0.17 at best: its careless workers
  gave 213 of the 1,080 votes (most of them 2 warm-up votes and a few active ones) and those agreed with the true
  order 56 % (warm-up) and 59 % (active) of the time by chance (seed 0: 42 %, 46 %; seed 5: 55 %, 48 %).
  Model changes tried, none of which moved seeds 4-5: the mixture over only the votes whose leave-one-out gap is
  far from 0 (|z| > 0.3: 0.13, 0.17; > 0.6: 0.15, 0.14; close pairs add almost nothing to a worker's likelihood
  ratio either way, so leaving them out changes little), ``kappa`` fixed at 1 (0.10, 0.15), and the share
  refitted against truths drawn from the scale posterior (10-90 %: 0.09-0.16, 0.14-0.19). Left as it is: on
  pilot-sized active studies the fit is unbiased within its noise (``tests/analysis/test_forecast.py``
  ``test_the_careless_share_of_an_active_pilot_is_recovered_without_bias``: 80 workers, 30 % random clickers,
  12 votes each, seeds 0-7: 0.30, 0.25, 0.28, 0.38, 0.25, 0.14, 0.41, 0.26 where 0.28-0.35 were, mean 0.28 for
  0.31). Its posterior is somewhat narrow: the truth fell inside the share's 90 % posterior interval at 6 of
  those 8 seeds (its draws ignore the uncertainty of ``kappa`` and of the scale the ratios are taken against);
  widening it is the open thread for the active band, not a shift of the share. Nor is the share what made
  seeds 4-5 low: with every replicate's crowd at the pilot's true share (a one-off ablation: 0.30, 0.29), the
  90 % forecasts were 5,250 (band 4,245-5,941) vs 6,093, -14 %, still outside (-16 % with the fitted share), and
  6,258 (5,547-6,843) vs 6,366, -2 % (-7 %). ``--only active --seeds 6`` on this code, re-run: the figures above
  to the vote (4 of 6 inside, median -12 %, |16 %|, 5 low); ``--only rating --seeds 4``: 8 of 8 inside, median
  +5 %, |5 %| (the paired model is unchanged, so ``--only small`` was not re-run: 5 of 6, +5 %, |13 %|).
* Issue 37 item 5, the active forecast's low cause found (``analysis/forecast.py``, ``_Crowd``). The active study's
  90 % forecasts went with the careless share of the *votes* the simulated crowd gave, and that was set by a
  dozen pilot workers: an active pilot (1,080 votes) is ~100 warm-up workers with 2-9 votes each and 12-16 workers
  who gave 36-132, and new simulated workers resampled a pilot worker's vote count *and type* together, so the few
  heavy workers' types were the crowd's. Careless votes, simulated (expected under the fit) vs in the rest of the
  real study, seeds 0-5: 0.14/0.30, 0.38/0.53, 0.20/0.31, 0.46/0.30, 0.14/0.37, 0.17/0.20; the forecast errors
  followed (-17 %, -16 %, -2 %, +31 %, -16 %, -7 %). Drawing the share anew per replicate could not move it (the
  heavy workers' posteriors are near 0 or 1 whatever the share), hence the earlier ablation's -16 % to -14 %. Now
  a new worker resamples a pilot worker's count and is careless at the replicate's drawn share (care independent
  of activity, as the generator has it; stated in the output's "assumes" lines). The fitted shares were nearer the
  rest of the study at 5 of 6 seeds (0.26, 0.34, 0.30, 0.35, 0.13, 0.17). ``--only active --seeds 6``: +3 %,
  -17 %, +2 %, +6 %, -17 %, -0 %; 5 of 6 inside (83 %), median +1 %, |4 %|, 3 low (before 4 of 6, -12 %, |16 %|,
  5 low). Seed 4 stays outside (5,076, band 4,478-5,636, vs 6,093): its pilot fits 0.13 careless workers where
  0.30 were (posterior 90 % interval 0.05-0.26), and the rest of the study got 0.37 careless votes.
  ``--only small --seeds 6``: +20 %, +6 %, -3 %, -7 %, +65 %, +106 %; 5 of 6 inside, median +13 %, |14 %|, 2
  low (before: 5 of 6, +5 %, |13 %|, 3 low): the random pilot's heavy workers told the vote share better than the
  fitted share (0.24-0.41 for 0.30) does, which the forecast now carries. tests/analysis/test_forecast.py's
  smaller active study: 3,825 (band 2,787-5,166) vs 2,816, inside (before: 3,720, 2,951-4,614, outside).
* Issue 37 item 3 kept with soft screening (``analysis/screening.py``): the forecast's half-widths are now
  ``analyze``'s, soft screening's weights included (``analysis.forecast.halfwidths`` through
  ``analysis.screening.scale_weights``), in the simulated studies and in the replays' actual needs alike, so that
  the forecast, ``[stopping]`` and ``results`` measure one precision. ``--only active --seeds 6``: +0 %, -21 %,
  +4 %, +11 %, -21 %, -9 %; 4 of 6 inside (67 %), median -4 %, |10 %|, 3 low (with hard screening, above: 5 of 6,
  +1 %, |4 %|). Seeds 1 and 4 are low and outside bands of about +-10 %: soft screening counts the careless
  workers' votes at their weight, so the need follows the careless share more closely than hard screening's did,
  and the share's posterior (given the fitted scale, its own uncertainty left out) is too narrow for that.
  ``--only small --seeds 6``: +6 %, -5 %, +4 %, -9 %, +51 %, +40 %; 5 of 6 inside, median +5 %, |8 %|, 2 low.
* NFLX (issue 37 item 5): two causes of the 20 % median error besides the 4 subjects' luck
  (``analysis/rating_forecast.py``). (1) Each stimulus' noise likelihood counted 4 ratings as 4 degrees of
  freedom, not the 3 their spread about their own mean has, so the chi-square scatter of the spreads read as
  stimuli differing: 4-rater simulated pilots with equally noisy stimuli fitted a log SD of 0.26 on average (0.40
  for a true 0.20); the NFLX pilots 0.15-0.60 (all 26 subjects: 0.20), and the every-sequence needs were forecast
  high (+35 %, +21 %, +27 % ...). Now tempered to ``n - 1`` (0.11 and 0.18 on the simulated pilots). (2) The
  forecast is the median of 20 replicates whose band spans about 4:1 for a 4-subject pilot: Monte Carlo error
  about 10 %; the ratings forecast now runs 200 replicates by default (``RATING_REPLICATES``; the CLI's and the
  dashboard's default; ``--rating-replicates`` here), still about a second for NFLX. ``--only rating nflx --seeds
  8``: NFLX 16 of 16 inside, median +1 %, |13 %|, 8 low (before +4 %, |20 %|, 7 low; (1) alone with 20
  replicates -7 %, |16 %|, 9 low; (2) alone +9 %, |18 %|, 6 low); the rating study 16 of 16, -1 %, |5 %|, 9 low
  (before -1 %, |5 %|, 8 low). No constant comes from NFLX. A prior on the noise toward published P.913
  inconsistencies was not tried: the typical values in print (Li and Bampis; Janowski and Pinson) are fitted on
  NFLX-like lab data, this very set among them.
* StudyMB-sized (``--only StudyMB --seed 0``, after issue 37 item 5; 10 minutes at load 5-6): 65,643 (band
  49,885-79,410) vs 68,453, -4 %, inside (model alone 59,683, -13 %; careless share fitted 0.31, 0.30 true);
  above, before the prediction band and the new workers' drawn share: 65,686 (55,519-70,657), -4 %, inside.
* No real paired-comparison data ships with the repository (tests/analysis/data holds the NFLX ratings only).
* Issue 37 item 5, the band's crowd (``analysis/forecast.py``: ``crowd_factors``, ``combined_band``). The active
  misses went with the careless share of the *votes* the rest of the study got, and six replicates draw that share
  six times: with 24 replicates at seeds 1, 4 and 7, a simulated study's need went with 1 / (1 - its careless vote
  share) to the power 0.65-1.00 (correlation 0.76-0.94), and the honest votes it needed (its need times the honest
  share) spread 1.3-2.7 times less (log SD 0.07-0.10 for 0.12-0.18); the replicates' own band then held seeds 4 and 7,
  outside it with six. A vote forecast's band is now the replicates' honest votes needed (their Student t
  prediction on the log scale) times the votes per honest vote of 1,000 further crowds drawn as a replicate's is
  (the share from its posterior, the pilot's workers' types under it, new workers resampling the pilot's vote
  counts; no analysis: 0.4 CPU s for the active study, 1.8 s at 70,000 votes), the forecast the median of those
  products; a careless vote is taken to add nothing (the fifth "assumes:" line of the CLI and the dashboard says
  so, with the crowds' 10-90 % votes per honest vote). The crowds' 10-90 % careless vote share held what the rest
  of the study got at 11 of 14 active seeds. Ratings keep the replicates' band (their Forecast has no crowds).
  ``--only active --seeds 14`` (seeds 0-13, about 15 minutes at load 10-15). Before: 8 of 14 inside (57 %; seeds
  0-9 7 of 10, seeds 0-5 4 of 6), median -1 %, |10 %|, 7 low, band width (high - low over the forecast) median 34 %
  (13-61 %); per seed +0, -21, +4, +11, -21, -9, -9, +13, +4, -2, +59, +34, -18, -5 %. After: 10 of 14 (71 %; seeds
  0-9 8 of 10, 80 %; seeds 0-5 4 of 6), median +1 %, |9 %|, 6 low, width 43 % (28-61 %); per seed +5, -23, +9, +21,
  -22, -7, +0, +8, -4, +1, +34, +36, -13, -4 %. Outside: seed 3 (6,930, band 5,768-8,964, vs 5,732: 36 votes below
  its band), seed 4 (4,520, 4,017-5,387, vs 5,796: the pilot fits 0.13 careless workers where the rest of the study
  got 0.36 careless votes, more votes per honest vote than 98 % of the crowds), seed 10 (+34 %: 0.46 fitted where
  the rest got 0.28, fewer than all but 6 % of the crowds) and seed 11 (+36 %: the replicates' honest votes needed
  24 % above the study's; at seeds 0, 3, 4, 6 and 10 that part was 2-5 % high). Seed 4's pilot shows 0.17 careless
  workers even against the true scale (above), which no band of a calibrated share can reach often.
  ``--only small --seeds 6``: before +6, -5, +4, -9, +51, +40 % (5 of 6, median +5 %, |8 %|, 2 low, width 71 %);
  after +3, +3, +3, -6, +56, +22 % (5 of 6, +3 %, |5 %|, 1 low, width 57 %). ``--only StudyMB`` (seed 0; 15 minutes
  at load 10-15): before 62,647 (band 51,753-74,781) vs 68,086, -8 %, inside, width 37 %; after 62,320
  (53,513-72,954), -8 %, inside, width 31 % (the need, 68,086, and -8 % are with soft screening's weights; the
  68,453 and -4 % above were measured before them). ``--only rating nflx --seeds 8``, unchanged: rating 16 of 16,
  -1 %, |5 %|, width 23 %; NFLX 16 of 16, +1 %, |13 %|, width 135 %. Tried and left out: a worker bootstrap of the
  pilot's mixture (Bayesian bootstrap weights on the workers, the share, ``kappa`` and the scales refitted per draw,
  1-4 CPU s each): its shares spread down to 0.00 (``kappa`` falling to 0.5-0.7 takes the careless workers in: on a
  dozen informative workers the mixture is barely identified) and moved seed 4 further down (10-90 % 0.00-0.19 for
  a fitted 0.13); marginalising ``kappa`` on a grid widened the share's 10-90 % posterior by at most 0.01.
* Issue 37 item 5, the active band's careless share (``analysis/forecast.py``: ``share_errors``,
  ``PilotFit.draw_share``). Why the active replays missed: the share fitted from the pilot missed the pilot's
  own workers' by more than its posterior said, and the forecast followed it. ``--only active --seed 14 --seeds 6``
  before (load 10-12): -6, +36, +65, -7, -10, +2 %; seeds 15 and 16 fitted 0.48 and 0.52 where the pilots' workers
  were 0.36 and 0.37 careless (seed 4: 0.13 for 0.30, -22 %; seed 10: 0.46 for 0.32, +34 %). Seeds 0-19 before:
  14 of 20 inside (70 %), median +1 %, |9 %|, band width 43 % (seeds 0-13) and 35-62 % (14-19). The honest votes
  needed were near where the share missed (seeds 3 and 4: the replicates' honest votes 5 % above the study's),
  so the item side was not what missed there; seed 11's was (above). Refitting simulated pilots of the fitted
  crowd (the pilot's pairs and workers, each careless at a share drawn from the posterior independently of how
  the fit classed them, the truth from the scale posterior; about 0.5-1 CPU s a refit of a 1,080-vote pilot)
  misses the drawn share by more than the posterior's SD: 0.124 for 0.064 at seed 4 (20 refits); on
  tests/analysis/test_forecast.py's 960-vote active pilots (seeds 0-6, 12 refits) 0.043-0.122 for 0.055-0.066;
  where every worker shows their type (40 workers, 60 votes each) as the posterior (0.066 for 0.071).
  First version (fitted share less the refits' mean miss, Student t by their SD; ``--only active --seeds 10``,
  ``--seed 10 --seeds 5``, ``--seed 15 --seeds 5``, load 12-17): 18 of 20 inside (90 %), median +2 %, |11 %|, 7
  low; per seed -5, -22, +29, +21, -17, -0, +4, +2, +2, +3, +28, +31, -6, +2, -11, +20, +87, -14, +1, +12 %;
  outside seed 2 (8,019, band 6,334-11,652, vs 6,240) and seed 11 (7,559, 6,438-9,158, vs 5,765: the honest
  side); band width median 56 % (36-210 %), and seeds 15 and 16 open-topped (a replicate drew a share so high it
  did not reach the target by 3 times the study). But the mean miss is mostly refits collapsing to 0 where a high
  share was drawn: the small active study of tests/analysis/test_forecast.py fitted 0.38 (0.31 careless), its
  refits missed by -0.11 on average (SD 0.22; five of 20 below -0.2), and the shift put its forecast at +65 %
  (3,754 for 2,281; before +38 %). So the misses now set the width only: the fitted share plus Student t draws
  (20 degrees of freedom) scaled by their root mean square. That test: 3,147 (band 2,171-5,848) vs 2,281, +38 %
  (before 3,141, 2,458-4,425). Replays of this version (``--only active --seed k --seeds 1``, load 12-16; the
  other seeds not re-run for want of time): seed 1 5,268 (3,950-7,844), -20 %, inside; 3 6,723 (5,246-9,143),
  +17 %, inside; 4 4,658 (3,836-5,937), -20 %, inside; 2 7,061 (5,271-10,177), +13 %, inside; 10 8,186
  (6,008-11,591), +31 %, inside; 11 7,344 (6,330-8,914), +27 %, outside; 15 7,450 (2,128-not reached), +18 %,
  inside; 16 10,769 (9,222-not reached), +73 %, outside: 6 of these 8 inside; seeds 2 and 16 swapped sides against the
  first version.
  ``--only small --seeds 6`` (first version; load 12-16): -1, -1, -9, -0, +48, +34 %, 5 of 6 inside (83 %),
  median -0 %, |5 %|, 4 low, width 70 % (before 5 of 6, +3 %, |5 %|, 1 low, width 57 %).
  ``--only rating nflx --seeds 8``: as before to the vote (rating 16 of 16, -1 %, |5 %|; NFLX 16 of 16, +1 %,
  |13 %|; 69 CPU s): the rating forecast draws no careless share of votes. StudyMB was not re-run (the share's
  refits of its 10,000-vote pilot would add minutes; killed unfinished at load 15).
  Final version, all 20 active seeds (``--only active --seed k --seeds n``: seeds 5-9, 0, 12-14 and 17-19 by the
  lead on an otherwise idle machine, the other eight above): 18 of 20 inside (90 %), median error -2 %, median
  |error| 12 %, 11 low; per seed 0..19: -4, -20, +13, +17, -20, -12, -5, +8, -6, +0, +31, +27 (outside), -11, -3,
  -12, +18 (band open-topped), +73 (outside), -9, -1, +6 %. StudyMB seed 0 (this version, refits included):
  62,084 (53,879-72,385) vs 68,086, -9 %, inside, band 30 % wide (forecast 172 s at load 3-7).
  The refits cost about 10 CPU s a forecast of a small pilot (tests/server/test_forecast_cli.py: 30 -> 157 CPU s
  for its 11 tests), so only actively sampled studies refit (``analysis.forecast.share_refits_for``): a random
  design keeps the posterior, under which its replays held (small 5 of 6, StudyMB inside, as before).

A real paired study (``--only krasula --seeds 8``; issue 37 item 5; the figures below were measured with the
share's refits, which random designs no longer run: without them, pilot 15 %, 12 of 16 inside (75 %), median -21 %,
|41 %|, 11 low, band 122 % wide; at 90 % of the images / every image: 0 -46 / -63 %, 1 +54 / +72 %, 2 -13 / -42 %,
3 -28 / -50 %, 4 +16 / +18 %, 5 -13 / -4 %, 6 +55 / -34 %, 7 -41 / -45 %; the bar, 80 % and 15 %, is not met
here): the sharpened-image comparisons of Krasula et
al. (tests/analysis/data/krasula_sharpening_pc_votes.csv and its README: 5 scenes x 8 images, 31 lab subjects, 2,128
votes, about 69 a subject). Subjects are added one by one in an order shuffled by the seed (each subject's votes
shuffled too: the file keeps no time), the first ``--pilot-share`` of them the pilot; the need is read off the
prefixes by ``votes_needed_by_study`` (checkpoints 5 % apart, 200 resamples), the target 1.05 times the widest
image's half-width with every subject, as for NFLX; random sampling, ``--replicates`` 6, 100 resamples. Load average
6-9 on the 2 cores. Pilot 15 % (5 subjects, 308-476 votes; 108 CPU s in all), error at 90 % of the images, at every
image: seed 0 -45 %, -70 % (597, band 407-853, vs 1,084; 563, 398-780, vs 1,876: both outside); 1 +25 %, +21 %;
2 -9 %, -39 %; 3 -38 %, -48 % (outside); 4 +14 %, +275 % (band 582-not reached); 5 -5 %, -8 %; 6 +29 %, -26 %; 7
-57 %, -59 % (both outside): 11 of 16 inside (69 %), median -18 %, |34 %|, 11 low, band 93 % of the forecast wide.
``--pilot-share 0.3`` (9 subjects, 504-756 votes; 93 CPU s): 0 -11 %, -31 %; 1 +40 %, +60 %; 2 -28 %, -42 % (both
outside); 3 -5 %, -25 %; 4 +22 % (outside), +67 %; 5 +14 %, +142 %; 6 +15 %, -1 %; 7 -41 % (outside), -36 %: 12 of
16 (75 %), median -3 %, |29 %|, 9 low, band 69 % wide. The careless share fitted 0.00 at every seed (lab subjects).
What the targets (3.21-3.77 JOD) measure: one scene (redhat), 13 of whose 28 pairs every subject judged alike (0-6
in the others), has half-widths of 0.8-3.1 JOD with every subject where the other four have 0.3-1.3, so both
quantiles are that scene's few widest images; their half-width is itself bootstrap-noisy (the whole study's widest
3.05-3.49 over three resampling seeds), and the every-image need lands at 1,876-2,120 of the 2,128 votes at 5 of 8
seeds (pilot 15 %), near the end by construction of the target. The forecast was not tuned to this data.

Issue 37 item 5, the Krasula miss found: the subjects, not the scale. Given the whole study's fitted scale as the truth
(every subject's votes; a one-off ablation), seed 0's forecast stayed as low (609 and 725 for 1,084 and 1,876). Case V
observers of that scale answering the recorded design (the same subjects, the same pairs) gave the redhat scene's
widest image a worker-bootstrap half-width of 0.83-1.17 JOD over three draws, where the recorded votes give 3.49:
subjects disagree among themselves far more than Case V observers do (with the subject labels shuffled over the votes,
1.7 for Case V's 1.3-1.4). Every subject judged every pair of the 2 or 3 scenes they saw, so a 5-subject pilot has
1 to 4 subjects a scene, and its inconsistency factor (0.96-2.34 over seeds 0-7) cannot show that. Tried first, on
the scale side, each with ``--seeds 8``: each set's prior SD drawn as a variance seen in ``n - 1`` degrees of
freedom (seeds 0-5 within a few per cent of before), or from its Laplace marginal posterior on a grid (10 of 16,
-16 %), the scale refitted on the worker-resampled pilot (seeds 0-5 as before), a Student t prior on the items (4
degrees of freedom: 13 of 16, -16 %; 2: 13 of 16, -16 %): none moved seeds 0, 3 and 7 (-30 % to -60 %). Now each
replicate's factor is multiplied by a draw of ``sqrt((W - 1) / chi2(W - 1))`` for the pilot's ``W`` honest workers
(``analysis.forecast.worker_spread``; random designs, where the factor is applied). ``--only krasula --seeds 8``
(load 9-11): 16 of 16 inside (100 %), median -7 %, |41 %|, 8 low, band 172 % wide; at 90 % of the images / every
image: 0 -31 / -51 % (750, band 396-1,430, vs 1,084; 926, 422-2,050, vs 1,876), 1 +71 / +107 %, 2 +3 / -34 %,
3 -18 / -35 %, 4 +28 / +42 %, 5 +43 / +182 % (3,527, band 1,091-not reached, vs 1,252), 6 +33 / -45 %, 7 -43 /
-41 % (800, 309-2,229, vs 1,407). ``--pilot-share 0.3`` (9 subjects): 13 of 16 (81 %), median +1 %, |26 %|, 7
low, band 102 % wide (before 12 of 16, -3 %, |29 %|, 69 %); outside seed 2 (-29 %, -35 %: bands 756-927 and
880-1,832) and seed 7 at 90 % (871, 588-1,284, vs 1,385). The forecasts scatter as widely as before (|41 %|): five subjects cannot tell
more, and the band now says so. The simulated studies' crowds are Case V (no heterogeneity), so there the draw only
widens: ``--only small --seeds 6`` +8, +4, +4, -4, +58 (outside), +37 %: 5 of 6 inside, median +6 %, |6 %|, 1 low,
width 57 % (before: 5 of 6, +3 %, |5 %|, 57 %; W = 78 honest pilot workers at seed 0, draws 0.91-1.12);
``--only StudyMB`` seed 0: 64,028 (54,699-75,229) vs 68,086, -6 %, inside, band 32 % wide (before, with the
share's refits: -9 %, inside, 30 %). The active study applies no factor: ``--only active --seeds 6`` as before to
the vote (-4, -20, +13, +17, -20, -12 %; 6 of 6 inside, median -8 %, |15 %|); ``--only rating nflx --seeds 8`` too
(rating 16 of 16, -1 %, |5 %|; NFLX 16 of 16, +1 %, |13 %|: another module).

Run: .venv/bin/python benchmarks/forecast.py [--replicates 8] [--rating-replicates 200] [--skip-large]
[--only rating nflx krasula] [--seeds 8] (5-10 minutes a seed on 2 cores with StudyMB; each NFLX replay a few
seconds, a Krasula one 10-40 s, the rating study 10-20 s at 200 replicates; an active or small replay 1-2 minutes).
The last table's "band width" is the median of (high - low) over the forecast.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.forecast import (StudyPlan, costs, fit_pilot, forecast, halfwidths, analysis_options,  # noqa: E402
                               known_crowd, share_refits_for, simulate_votes, votes_needed_by_study)
from analysis.rating_forecast import (RATING_REPLICATES, fit_rating_pilot, forecast_ratings,  # noqa: E402
                                      halfwidths as rating_halfwidths, ratings_needed_by_study, simulate_whole_study)
from analysis.simulate import simulate_study  # noqa: E402
from analysis.threads import limited_blas_threads  # noqa: E402
from benchmarks._common import print_table  # noqa: E402

QUANTILES = (0.9, 1.0)
RECORDS: list[dict] = []  # one per row: the numbers of the summary (kind, quantile, actual, forecast, band)
HEADER = ["study", "sampling", "votes", "pilot", "target", "q", "actual", "forecast", "band (10-90 %)", "error",
          "in band", "model only", "error", "actual $", "forecast $", "inconsistency", "seconds"]


def regular_study(n_sets: int, n_items: int, n_workers: int, seed: int):
    """The votes and which of their workers were honest."""
    study = simulate_study(n_sets=n_sets, n_items=n_items, degree=6, votes_per_pair=20, n_workers=n_workers, seed=seed)
    return study.votes, study.honest_mask


def active_study(n_sets: int, n_items: int, n_workers: int, total: int, seed: int):
    """A warm-up (one vote on each pair of a 4-regular design) continued by active sampling to ``total`` votes;
    the votes and which of their workers were honest."""
    warm = simulate_study(n_sets=n_sets, n_items=n_items, degree=4, votes_per_pair=1, n_workers=n_workers, seed=seed)
    rng = np.random.default_rng(seed)
    activity = np.exp(rng.normal(0.0, 0.5, n_workers))
    per_worker = np.maximum(1, np.round(activity / activity.sum() * total)).astype(int)
    honest = {w: t == "honest" for w, t in zip(warm.worker_ids, warm.worker_type)}
    crowd = known_crowd(warm.votes, warm.truth, warm.item_ids, honest, dict(zip(warm.worker_ids, per_worker)))
    return simulate_votes(crowd, "active", total, rng, with_honest=True)


def _row(name: str, sampling: str, total: int, n_pilot: int, target: str, quantile: float, truth: float, result, q: int,
         fit, plan: StudyPlan, started: float) -> list:
    """One row of the table: the actual need, the forecast and its band, their errors and dollars."""
    band = result.votes_needed(q)
    truth_text = f"{truth:,.0f}" if np.isfinite(truth) else f">{total:,}"
    forecast_text = "-" if band["total"] is None else f"{band['total']:,}"
    low = "-" if band["low"] is None else f"{band['low']:,}"
    high = "not reached" if band["high"] is None else f"{band['high']:,}"
    error = (f"{100 * (band['total'] - truth) / truth:+.0f} %" if np.isfinite(truth) and band["total"] is not None
             else "-")
    model = band["model_only"]
    model_text = "-" if model["total"] is None else f"{model['total']:,}"
    model_error = (f"{100 * (model['total'] - truth) / truth:+.0f} %" if np.isfinite(truth)
                   and model["total"] is not None else "-")
    inside = ("yes" if np.isfinite(truth) and band["low"] is not None and band["low"] <= truth
              and (band["high"] is None or truth <= band["high"]) else "no" if np.isfinite(truth) else "-")
    cost_forecast = costs(band["total"], fit, plan)["dollars"]
    cost_actual = costs(truth, fit, plan)["dollars"] if np.isfinite(truth) else None
    RECORDS.append({"kind": name.split(" ")[0], "q": quantile, "actual": truth, "forecast": band["total"],
                    "low": band["low"], "high": band["high"], "inside": inside})
    return [name, sampling, f"{total:,}", f"{n_pilot:,}", target, f"{quantile:g}", truth_text, forecast_text,
            f"{low}-{high}", error, inside, model_text, model_error,
            "-" if cost_actual is None else f"${cost_actual:,.0f}",
            "-" if cost_forecast is None else f"${cost_forecast:,.0f}",
            f"{float(np.median(result.inconsistency[:, q])):.2f}", f"{time.perf_counter() - started:.0f}"]


def replay(name: str, study, sampling: str, pilot_share: float, replicates: int, seed: int,
           n_boot: int = 100) -> list[list]:
    votes, honest = study
    started = time.perf_counter()
    full, _ = halfwidths(votes, analysis_options("jod"), 200, 0.95, np.random.default_rng(seed))
    target = round(1.1 * float(np.quantile(np.concatenate(full), 0.9)), 2)
    actual = votes_needed_by_study(votes, target, quantiles=QUANTILES, growth=1.15, n_boot=200, seed=seed)
    n_pilot = int(pilot_share * len(votes))
    pilot = votes.subset(np.arange(len(votes)) < n_pilot)
    fit = fit_pilot(pilot, "jod", seed=seed, share_refits=share_refits_for(sampling))
    # The plan's pages per worker (a pilot cut from a running study has seen only its workers' first votes).
    per_worker = len(votes) / len(np.unique(votes.worker))
    result = forecast(fit, target, quantiles=QUANTILES, sampling=sampling, replicates=replicates, seed=seed,
                      max_votes=3 * len(votes), votes_per_worker=per_worker, n_boot=n_boot)
    plan = StudyPlan()
    rows = [_row(name, sampling, len(votes), n_pilot, f"{target:g} JOD", quantile, actual["needed"][q], result, q,
                 fit, plan, started) for q, quantile in enumerate(QUANTILES)]
    in_pilot = fit.worker_votes > 0
    repeats = "-" if fit.careless_share_repeats is None else f"{fit.careless_share_repeats:.2f}"
    true_share = 1.0 - honest[in_pilot].mean()
    print(f"  {name}: careless share fitted {fit.careless_share:.2f} (pilot's workers {true_share:.2f}; "
          f"from repeated pairs {repeats}), "
          f"{per_worker:.0f} votes per worker, forecast {result.seconds:.0f} s",
          flush=True)
    return rows


def rating_replay(pilot_share: float, replicates: int, seed: int) -> list[list]:
    """The rating study (3 scenes x 40 stimuli, 400 workers, 25 % careless, 10-40 ratings each): its MOS half-widths
    as [stopping] measures them, the ratings it needed and the forecast from its first ratings."""
    started = time.perf_counter()
    crowd, study = simulate_whole_study(seed=seed)
    J, total = len(crowd.stimulus_ids), len(study.rating)
    full = rating_halfwidths(study.stimulus, study.worker, study.rating, J, int(study.worker.max()) + 1)
    target = round(1.05 * float(np.max(full)), 2)  # every stimulus of the whole study reaches it
    actual = ratings_needed_by_study(study.stimulus, study.worker, study.rating, J, target, quantiles=QUANTILES,
                                     growth=1.05)
    n_pilot = int(pilot_share * total)
    pilot = study.ratings(crowd, n_pilot)
    fit = fit_rating_pilot(pilot, stimuli=crowd.stimulus_ids)
    per_worker = total / len(np.unique(study.worker))  # the plan's (the pilot has seen its workers' first ratings)
    result = forecast_ratings(fit, target, quantiles=QUANTILES, replicates=replicates, seed=seed,
                              max_ratings=3 * total, ratings_per_worker=per_worker)
    plan = StudyPlan(reward=0.90, bonus_per_page=0.60)  # a rating study's defaults: 20 a page, 2 of them checks
    rows = [_row(f"rating (seed {seed})", "least-rated", total, n_pilot, f"{target:g} pts", quantile,
                 actual["needed"][q],
                 result, q, fit, plan, started) for q, quantile in enumerate(QUANTILES)]
    careless = 1.0 - study.honest[[int(w[1:]) for w in pilot.worker_ids]].mean()
    print(f"  rating: careless share fitted {fit.careless_share:.2f} (pilot's workers {careless:.2f}), bias SD "
          f"{fit.bias_sd:.2f} (0.35), inconsistency RMS {fit.inconsistency_rms:.2f} (0.70), {per_worker:.0f} ratings "
          f"per worker, forecast {result.seconds:.1f} s", flush=True)
    return rows


DATA = Path(__file__).resolve().parent.parent / "tests" / "analysis" / "data"
NFLX = DATA / "nflx_public_ratings.csv"
KRASULA = DATA / "krasula_sharpening_pc_votes.csv"


def worker_order(worker: np.ndarray, n_workers: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A recorded study replayed as if its workers had come one by one: each worker's rank in an order shuffled by
    ``seed``, and the order of the rows that puts them worker by worker (each worker's own rows shuffled too, as
    the files keep no time)."""
    rng = np.random.default_rng(seed)
    order_w = rng.permutation(n_workers)
    rank = np.empty_like(order_w)
    rank[order_w] = np.arange(n_workers)
    return rank, np.lexsort((rng.random(len(worker)), rank[worker]))


def nflx_replay(pilot_share: float, replicates: int, seed: int) -> list[list]:
    """The public NFLX ratings (tests/analysis/data: 70 test sequences x 26 subjects, ACR 1..5; hidden references
    aside): its subjects added one by one (in an order shuffled by ``seed``, each subject's ratings shuffled too),
    the first ``pilot_share`` of the subjects the pilot; the target 1.05 times the widest sequence's half-width
    with every subject, so that the whole study reaches it."""
    from analysis.rating_forecast import counted_rows
    from analysis.ratings import build_ratings, read_ratings

    started = time.perf_counter()
    data = read_ratings(NFLX)
    rows = np.flatnonzero(counted_rows(data))
    rank, order = worker_order(data.worker[rows], len(data.worker_ids), seed)
    rows = rows[order]
    stimuli, stimulus = np.unique(data.stimulus[rows], return_inverse=True)
    worker = rank[data.worker[rows]]
    rating = data.rating[rows]
    J, total = len(stimuli), len(rows)
    full = rating_halfwidths(stimulus, worker, rating, J, int(worker.max()) + 1)
    target = round(1.05 * float(np.max(full)), 2)
    n_workers = int(worker.max()) + 1
    pilot_workers = max(2, int(round(pilot_share * n_workers)))
    n_pilot = int(np.sum(worker < pilot_workers))
    actual = ratings_needed_by_study(stimulus, worker, rating, J, target, quantiles=QUANTILES, start=n_pilot,
                                     growth=1.02)
    pilot = build_ratings(np.char.add("s", worker[:n_pilot].astype(str)),
                          data.stimulus_ids[stimuli[stimulus[:n_pilot]]],
                          [repr(float(v)) for v in rating[:n_pilot]], scale="acr")
    fit = fit_rating_pilot(pilot)
    result = forecast_ratings(fit, target, quantiles=QUANTILES, replicates=replicates, seed=seed,
                              max_ratings=3 * total, ratings_per_worker=J)
    plan = StudyPlan(reward=0.90, bonus_per_page=0.60)
    rows_out = [_row(f"NFLX (seed {seed})", "least-rated", total, n_pilot, f"{target:g} pts", quantile,
                     actual["needed"][q], result, q, fit, plan, started) for q, quantile in enumerate(QUANTILES)]
    print(f"  NFLX seed {seed}: pilot {pilot_workers} of {n_workers} subjects, inconsistency RMS "
          f"{fit.inconsistency_rms:.2f}, forecast {result.seconds:.1f} s", flush=True)
    return rows_out


def krasula_replay(pilot_share: float, replicates: int, seed: int, n_boot: int = 100) -> list[list]:
    """The sharpened-image paired comparisons of Krasula et al. (tests/analysis/data: 5 scenes x 8 images, 31
    lab subjects, 2,128 votes): its subjects added one by one (in an order shuffled by ``seed``, each subject's
    votes shuffled too), the first ``pilot_share`` of the subjects the pilot; the target 1.05 times the widest
    image's half-width with every subject, so that the whole study reaches it."""
    from analysis.formats import read_votes

    started = time.perf_counter()
    recorded = read_votes(KRASULA)
    rank, order = worker_order(recorded.worker, len(recorded.worker_ids), seed)
    votes = recorded.subset(order)
    full, _ = halfwidths(votes, analysis_options("jod"), 200, 0.95, np.random.default_rng(seed))
    target = round(1.05 * float(np.max(np.concatenate(full))), 2)
    n_workers = len(votes.worker_ids)
    pilot_workers = max(2, int(round(pilot_share * n_workers)))
    in_pilot = rank[votes.worker] < pilot_workers
    n_pilot = int(in_pilot.sum())  # the pilot's votes come first in ``votes``
    actual = votes_needed_by_study(votes, target, quantiles=QUANTILES, start=n_pilot, growth=1.05, n_boot=200,
                                   seed=seed)
    fit = fit_pilot(votes.subset(in_pilot), "jod", seed=seed, share_refits=share_refits_for("random"))
    per_worker = len(votes) / n_workers
    result = forecast(fit, target, quantiles=QUANTILES, sampling="random", replicates=replicates, seed=seed,
                      max_votes=3 * len(votes), votes_per_worker=per_worker, n_boot=n_boot)
    rows = [_row(f"Krasula (seed {seed})", "recorded", len(votes), n_pilot, f"{target:g} JOD", quantile,
                 actual["needed"][q], result, q, fit, StudyPlan(), started) for q, quantile in enumerate(QUANTILES)]
    print(f"  Krasula seed {seed}: pilot {pilot_workers} of {n_workers} subjects, careless share fitted "
          f"{fit.careless_share:.2f}, {per_worker:.0f} votes per subject, forecast {result.seconds:.0f} s", flush=True)
    return rows


def summary(records: list[dict]) -> list[list]:
    """Per kind of replay and over all: how many needs fell inside their band, the median error, the median
    absolute error, the forecasts below what the study needed (the worse error) and the median width of the band
    over the forecast (high - low, of the needs with a closed band)."""
    kinds = list(dict.fromkeys(r["kind"] for r in records)) + ["all"]
    out = []
    for kind in kinds:
        mine = [r for r in records if (kind == "all" or r["kind"] == kind) and np.isfinite(r["actual"])
                and r["forecast"] is not None]
        if not mine:
            continue
        error = np.array([(r["forecast"] - r["actual"]) / r["actual"] for r in mine])
        inside = sum(r["inside"] == "yes" for r in mine)
        width = [(r["high"] - r["low"]) / r["forecast"] for r in mine if r["low"] is not None and r["high"] is not None]
        out.append([kind, len(mine), f"{inside} ({100 * inside / len(mine):.0f} %)", f"{100 * np.median(error):+.0f} %",
                    f"{100 * np.median(np.abs(error)):.0f} %", f"{int(np.sum(error < 0))}",
                    f"{100 * np.median(width):.0f} %" if width else "-"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=6, help="simulated studies of a paired forecast")
    parser.add_argument("--rating-replicates", type=int, default=RATING_REPLICATES,
                        help="simulated studies of a ratings forecast (the rating study and NFLX)")
    parser.add_argument("--pilot-share", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1, help="replay each study at seeds --seed .. --seed + seeds - 1")
    parser.add_argument("--bootstrap", type=int, default=100, help="resamples at each checkpoint of the forecast")
    parser.add_argument("--only", choices=["StudyMB", "small", "active", "rating", "nflx", "krasula"], nargs="+",
                        help="replay these studies only")
    parser.add_argument("--skip-large", action="store_true", help="leave out the StudyMB-sized study")
    args = parser.parse_args()
    rows = []
    with limited_blas_threads():
        for seed in range(args.seed, args.seed + args.seeds):
            studies = [("small", lambda: regular_study(3, 40, 120, seed + 1), "random"),
                       ("active", lambda: active_study(3, 40, 120, 7200, seed + 2), "active"),
                       ("rating", None, "least-rated"), ("nflx", None, "least-rated"), ("krasula", None, "random"),
                       ("StudyMB", lambda: regular_study(8, 155, 300, seed), "random")]
            if args.skip_large and not (args.only and "StudyMB" in args.only):
                studies = studies[:-1]
            if args.only:
                studies = [s for s in studies if s[0] in args.only]
            for name, make, sampling in studies:
                if name == "rating":
                    rows += rating_replay(args.pilot_share, args.rating_replicates, seed)
                elif name == "nflx":
                    rows += nflx_replay(args.pilot_share, args.rating_replicates, seed)
                elif name == "krasula":
                    rows += krasula_replay(args.pilot_share, args.replicates, seed, args.bootstrap)
                else:
                    rows += replay(f"{name} (seed {seed})", make(), sampling, args.pilot_share, args.replicates, seed,
                                   args.bootstrap)
                print_table(HEADER, rows[-len(QUANTILES):])
                sys.stdout.flush()
    print()
    print_table(HEADER, rows)
    print()
    print_table(["replays", "needs", "inside band", "median error", "median |error|", "low", "band width"],
                summary(RECORDS))


if __name__ == "__main__":
    main()
