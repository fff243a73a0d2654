//! The inference features through the safe crate on the CPU backend, against a float64
//! reference written here: masks and biases, varlen batches, contiguous and paged KV caches,
//! merging partial results, and the checks on run arguments.
use flashattn::{
    Alibi, Bf16, Config, Context, DType, Descale, Device, E4m3, Layout, MergeConfig, RunArgs, Status, F16,
};

/// Uniform in +-[1/64, 1] from a fixed LCG, rounded to f32 (what the library reads).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let mag = 1.0 / 64.0 + u * (1.0 - 1.0 / 64.0);
            (if (s >> 7) & 1 == 1 { mag } else { -mag }) as f32
        })
        .collect()
}

#[derive(Clone, Copy, Default)]
struct Masks<'a> {
    causal: bool,
    window: Option<(i64, i64)>,
    softcap: f64,
    slopes: Option<&'a [f32]>, // heads_q slopes of this sequence
    sinks: Option<&'a [f32]>,
    dv: usize, // v's and o's head dim; 0: d
}

/// One packed sequence: q [sq, hq, d], k [sk, hkv, d], v [sk, hkv, dv]; returns o [sq, hq, dv] and
/// lse [hq, sq] (dv from `m`, d when 0).
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (sq, sk, hq, hkv, d): (usize, usize, usize, usize, usize),
    m: Masks<'_>,
) -> (Vec<f64>, Vec<f64>) {
    let scale = 1.0 / (d as f64).sqrt();
    let dv = if m.dv == 0 { d } else { m.dv };
    let mut o = vec![0.0; sq * hq * dv];
    let mut lse = vec![f64::NEG_INFINITY; hq * sq];
    for h in 0..hq {
        let g = h / (hq / hkv);
        for i in 0..sq {
            let diag = i as i64 + sk as i64 - sq as i64; // key j is "at" query i when j == diag
            let visible = |j: usize| {
                let j = j as i64;
                let mut ok = !m.causal || j <= diag;
                if let Some((l, r)) = m.window {
                    ok &= l < 0 || j >= diag - l;
                    ok &= r < 0 || j <= diag + r;
                }
                ok
            };
            let s: Vec<f64> = (0..sk)
                .map(|j| {
                    if !visible(j) {
                        return f64::NEG_INFINITY;
                    }
                    let mut x: f64 = (0..d)
                        .map(|c| q[(i * hq + h) * d + c] as f64 * k[(j * hkv + g) * d + c] as f64)
                        .sum::<f64>()
                        * scale;
                    if m.softcap > 0.0 {
                        x = m.softcap * (x / m.softcap).tanh();
                    }
                    if let Some(sl) = m.slopes {
                        x -= sl[h] as f64 * (diag - j as i64).abs() as f64;
                    }
                    x
                })
                .collect();
            let sink = m.sinks.map_or(f64::NEG_INFINITY, |s| s[h] as f64);
            let mx = s.iter().cloned().fold(sink, f64::max);
            if mx == f64::NEG_INFINITY {
                continue;
            }
            let l: f64 = s.iter().map(|x| (x - mx).exp()).sum::<f64>() + (sink - mx).exp();
            lse[h * sq + i] = mx + l.ln();
            for c in 0..dv {
                o[(i * hq + h) * dv + c] =
                    (0..sk).map(|j| (s[j] - mx).exp() / l * v[(j * hkv + g) * dv + c] as f64).sum();
            }
        }
    }
    (o, lse)
}

fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w == f64::NEG_INFINITY { g == f32::NEG_INFINITY } else { (g as f64 - w).abs() <= tol };
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}

const TOL: f64 = 2e-5;

#[test]
fn value_head_dim_sizes_v_and_o() {
    // DeepSeek-style 192/128 (kept small: 24/8), GQA, causal, in both layouts; the scale stays
    // 1/sqrt(head_dim).
    let ctx = Context::new(Device::Cpu).unwrap();
    let (b, sq, sk, hq, hkv, d, dv) = (2usize, 5usize, 9usize, 4usize, 2usize, 24usize, 8usize);
    let q = data(b * sq * hq * d, 31);
    let k = data(b * sk * hkv * d, 32);
    let v = data(b * sk * hkv * dv, 33);
    let builder = Config::builder(DType::F32, b as i64, sq as i64, sk as i64, hq as i64, hkv as i64, d as i64)
        .head_dim_v(dv as i64)
        .causal(true);
    let config = builder.build().unwrap();
    let e = config.extents().unwrap();
    assert_eq!((e.q, e.k, e.v, e.o), (q.len(), k.len(), v.len(), b * sq * hq * dv));
    let mut o = vec![f32::NAN; e.o];
    let mut lse = vec![f32::NAN; b * hq * sq];
    ctx.forward(&config, &q, &k, &v, &mut o, Some(&mut lse)).unwrap();
    let masks = Masks { causal: true, dv, ..Masks::default() };
    for bi in 0..b {
        let (ro, rl) = reference(
            &q[bi * sq * hq * d..(bi + 1) * sq * hq * d],
            &k[bi * sk * hkv * d..(bi + 1) * sk * hkv * d],
            &v[bi * sk * hkv * dv..(bi + 1) * sk * hkv * dv],
            (sq, sk, hq, hkv, d),
            masks,
        );
        assert_close("o", &o[bi * sq * hq * dv..(bi + 1) * sq * hq * dv], &ro, TOL);
        assert_close("lse", &lse[bi * hq * sq..(bi + 1) * hq * sq], &rl, TOL);
    }
    // An o sized for head_dim is not what the config says.
    let mut o_wide = vec![0.0f32; e.o - 1];
    let err = ctx.forward(&config, &q, &k, &v, &mut o_wide, None).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    // Layout::Bhsd strides v and o by head_dim_v: the same numbers from transposed buffers.
    let bhsd = builder.layout(Layout::Bhsd).build().unwrap();
    let swap = |x: &[f32], s: usize, h: usize, dim: usize, to_bhsd: bool| -> Vec<f32> {
        let mut y = vec![0.0f32; x.len()];
        for (bi, si, hi, c) in (0..b).flat_map(|bi| (0..s).flat_map(move |si| (0..h).flat_map(move |hi| (0..dim).map(move |c| (bi, si, hi, c))))) {
            let (bshd, bhsd) = (((bi * s + si) * h + hi) * dim + c, ((bi * h + hi) * s + si) * dim + c);
            if to_bhsd { y[bhsd] = x[bshd] } else { y[bshd] = x[bhsd] }
        }
        y
    };
    let mut o_t = vec![f32::NAN; e.o];
    ctx.forward(&bhsd, &swap(&q, sq, hq, d, true), &swap(&k, sk, hkv, d, true), &swap(&v, sk, hkv, dv, true), &mut o_t, None)
        .unwrap();
    assert_eq!(swap(&o_t, sq, hq, dv, false), o);
    // Hostile: a negative value is named.
    let err = Config::builder(DType::F32, 1, 1, 1, 1, 1, 8).head_dim_v(-3).build().err().unwrap();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("head_dim_v = -3"), "{}", err.detail());
}

#[test]
fn masks_and_biases_match_the_reference() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let (b, sq, sk, hq, hkv, d) = (2usize, 5usize, 9usize, 4usize, 2usize, 8usize);
    let q = data(b * sq * hq * d, 11);
    let k = data(b * sk * hkv * d, 12);
    let v = data(b * sk * hkv * d, 13);
    let slopes: Vec<f32> = (0..b * hq).map(|i| 0.05 + 0.1 * i as f32).collect();
    let sinks = vec![0.5f32, -1.0, 2.0, 0.0];
    // (causal, window, softcap, alibi, sinks)
    let cases: [(bool, Option<(i64, i64)>, f32, Alibi, bool); 8] = [
        (false, Some((2, 1)), 0.0, Alibi::Off, false),
        (true, Some((-1, -1)), 0.0, Alibi::Off, false), // documented as no window
        (true, Some((3, -1)), 0.0, Alibi::Off, false),
        (false, Some((-1, 0)), 0.0, Alibi::Off, false), // a window that is causal
        (false, None, 0.7, Alibi::Off, false),
        (true, None, 0.0, Alibi::PerHead, false),
        (false, Some((1, 1)), 1.5, Alibi::PerBatch, true),
        (true, Some((0, 0)), 0.0, Alibi::Off, true),
    ];
    for (n, &(causal, window, softcap, alibi, with_sinks)) in cases.iter().enumerate() {
        let mut builder = Config::builder(DType::F32, b as i64, sq as i64, sk as i64, hq as i64, hkv as i64, d as i64)
            .causal(causal)
            .softcap(softcap)
            .alibi(alibi)
            .sinks(with_sinks);
        if let Some((l, r)) = window {
            builder = builder.window(l, r);
        }
        let config = builder.build().unwrap();
        let args = RunArgs {
            alibi_slopes: match alibi {
                Alibi::Off => None,
                Alibi::PerHead => Some(&slopes[..hq]),
                Alibi::PerBatch => Some(&slopes[..]),
            },
            sinks: with_sinks.then_some(&sinks[..]),
            ..RunArgs::default()
        };
        let mut o = vec![f32::NAN; q.len()];
        let mut lse = vec![f32::NAN; b * hq * sq];
        ctx.forward_ex(&config, &q, &k, &v, &mut o, Some(&mut lse), &args).unwrap();
        for bi in 0..b {
            let slope_row = match alibi {
                Alibi::Off => None,
                Alibi::PerHead => Some(&slopes[..hq]),
                Alibi::PerBatch => Some(&slopes[bi * hq..(bi + 1) * hq]),
            };
            let masks = Masks {
                causal,
                window,
                softcap: softcap as f64,
                slopes: slope_row,
                sinks: with_sinks.then_some(&sinks[..]),
                dv: d,
            };
            let qs = &q[bi * sq * hq * d..(bi + 1) * sq * hq * d];
            let ks = &k[bi * sk * hkv * d..(bi + 1) * sk * hkv * d];
            let vs = &v[bi * sk * hkv * d..(bi + 1) * sk * hkv * d];
            let (ro, rl) = reference(qs, ks, vs, (sq, sk, hq, hkv, d), masks);
            assert_close(&format!("case {n} o"), &o[bi * sq * hq * d..(bi + 1) * sq * hq * d], &ro, TOL);
            assert_close(&format!("case {n} lse"), &lse[bi * hq * sq..(bi + 1) * hq * sq], &rl, TOL);
        }
    }
}

#[test]
fn varlen_batches_with_an_empty_sequence() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let (hq, hkv, d) = (4usize, 1usize, 16usize);
    let lens_q = [3usize, 0, 5, 1];
    let lens_k = [4usize, 0, 7, 6];
    let cu = |lens: &[usize]| -> Vec<i32> {
        std::iter::once(0).chain(lens.iter().scan(0, |acc, &n| { *acc += n as i32; Some(*acc) })).collect()
    };
    let (cu_q, cu_k) = (cu(&lens_q), cu(&lens_k));
    let (total_q, total_k) = (*cu_q.last().unwrap() as usize, *cu_k.last().unwrap() as usize);
    let q = data(total_q * hq * d, 21);
    let k = data(total_k * hkv * d, 22);
    let v = data(total_k * hkv * d, 23);
    let config = Config::builder(DType::F32, 4, 5, 7, hq as i64, hkv as i64, d as i64)
        .varlen(total_q as i64, total_k as i64)
        .causal(true)
        .build()
        .unwrap();
    let mut o = vec![f32::NAN; q.len()];
    let mut lse = vec![f32::NAN; hq * total_q];
    let args = RunArgs { cu_seqlens_q: Some(&cu_q), cu_seqlens_k: Some(&cu_k), ..RunArgs::default() };
    let plan = ctx.plan(&config).unwrap();
    assert_eq!(plan.num_splits().unwrap(), 1);
    plan.run_ex(&q, &k, &v, &mut o, Some(&mut lse), &args).unwrap();
    for bi in 0..lens_q.len() {
        let (q0, q1, k0, k1) = (cu_q[bi] as usize, cu_q[bi + 1] as usize, cu_k[bi] as usize, cu_k[bi + 1] as usize);
        let (ro, rl) = reference(
            &q[q0 * hq * d..q1 * hq * d],
            &k[k0 * hkv * d..k1 * hkv * d],
            &v[k0 * hkv * d..k1 * hkv * d],
            (q1 - q0, k1 - k0, hq, hkv, d),
            Masks { causal: true, ..Masks::default() },
        );
        assert_close(&format!("seq {bi} o"), &o[q0 * hq * d..q1 * hq * d], &ro, TOL);
        for h in 0..hq {
            let got: Vec<f32> = (q0..q1).map(|t| lse[h * total_q + t]).collect();
            assert_close(&format!("seq {bi} lse head {h}"), &got, &rl[h * (q1 - q0)..(h + 1) * (q1 - q0)], TOL);
        }
    }
}

#[test]
fn contiguous_and_paged_caches_agree_with_the_reference() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let (b, sq, capacity, hq, hkv, d) = (2usize, 2usize, 10usize, 4usize, 2usize, 8usize);
    let seqlens = [7i32, 3];
    let q = data(b * sq * hq * d, 31);
    let k = data(b * capacity * hkv * d, 32);
    let v = data(b * capacity * hkv * d, 33);
    let row = hkv * d;
    let dense = Config::builder(DType::F32, b as i64, sq as i64, capacity as i64, hq as i64, hkv as i64, d as i64)
        .kv_cache()
        .causal(true);
    let mut o_cache = vec![f32::NAN; q.len()];
    let mut lse_cache = vec![f32::NAN; b * hq * sq];
    let args = RunArgs { cache_seqlens: Some(&seqlens), ..RunArgs::default() };
    ctx.forward_ex(&dense.build().unwrap(), &q, &k, &v, &mut o_cache, Some(&mut lse_cache), &args).unwrap();
    for bi in 0..b {
        let n = seqlens[bi] as usize;
        let base = bi * capacity * row;
        let (ro, rl) = reference(
            &q[bi * sq * hq * d..(bi + 1) * sq * hq * d],
            &k[base..base + n * row],
            &v[base..base + n * row],
            (sq, n, hq, hkv, d),
            Masks { causal: true, ..Masks::default() },
        );
        assert_close("cache o", &o_cache[bi * sq * hq * d..(bi + 1) * sq * hq * d], &ro, TOL);
        assert_close("cache lse", &lse_cache[bi * hq * sq..(bi + 1) * hq * sq], &rl, TOL);
    }

    // The same cache in pages of 3 rows, scattered through a pool in a shuffled order.
    let (page, max_pages, num_pages) = (3usize, 4usize, 9usize);
    let order = [5usize, 2, 8, 0, 7, 3, 1, 6]; // pool page of (sequence bi, page j) = order[bi * 4 + j]
    let mut k_pages = data(num_pages * page * row, 34); // rows no table entry names stay noise
    let mut v_pages = data(num_pages * page * row, 35);
    let mut table = vec![0i32; b * max_pages];
    for bi in 0..b {
        for j in 0..max_pages {
            let p = order[bi * max_pages + j];
            table[bi * max_pages + j] = p as i32;
            for r in 0..page {
                let src_row = j * page + r;
                if src_row >= capacity {
                    continue;
                }
                let src = (bi * capacity + src_row) * row;
                let dst = (p * page + r) * row;
                k_pages[dst..dst + row].copy_from_slice(&k[src..src + row]);
                v_pages[dst..dst + row].copy_from_slice(&v[src..src + row]);
            }
        }
    }
    let paged = Config::builder(DType::F32, b as i64, sq as i64, capacity as i64, hq as i64, hkv as i64, d as i64)
        .paged_kv(num_pages as i64, page as i64, max_pages as i64)
        .causal(true)
        .build()
        .unwrap();
    let mut o_paged = vec![f32::NAN; q.len()];
    let mut lse_paged = vec![f32::NAN; b * hq * sq];
    let args = RunArgs { cache_seqlens: Some(&seqlens), block_table: Some(&table), ..RunArgs::default() };
    ctx.forward_ex(&paged, &q, &k_pages, &v_pages, &mut o_paged, Some(&mut lse_paged), &args).unwrap();
    let widen = |x: &[f32]| -> Vec<f64> { x.iter().map(|&e| e as f64).collect() };
    assert_close("paged o", &o_paged, &widen(&o_cache), 1e-6);
    assert_close("paged lse", &lse_paged, &widen(&lse_cache), 1e-6);

    // A page index outside the pool, in a page the sequence reads (its third: rows 6..8), is
    // named, and o stays untouched.
    let mut bad = table.clone();
    bad[2] = num_pages as i32;
    let mut o_bad = vec![f32::NAN; q.len()];
    let args = RunArgs { cache_seqlens: Some(&seqlens), block_table: Some(&bad), ..RunArgs::default() };
    let err = ctx.forward_ex(&paged, &q, &k_pages, &v_pages, &mut o_bad, None, &args).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("block_table"), "{}", err.detail());
    assert!(o_bad.iter().all(|x| x.is_nan()));
}

#[test]
fn merging_two_halves_gives_the_whole() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let (b, sq, sk, h, d) = (2usize, 3usize, 10usize, 2usize, 8usize);
    let split = 4usize;
    let q = data(b * sq * h * d, 41);
    let k = data(b * sk * h * d, 42);
    let v = data(b * sk * h * d, 43);
    let run = |lo: usize, hi: usize| -> (Vec<f32>, Vec<f32>) {
        let take = |x: &[f32]| -> Vec<f32> {
            (0..b).flat_map(|bi| x[(bi * sk + lo) * h * d..(bi * sk + hi) * h * d].to_vec()).collect()
        };
        let config = Config::builder(DType::F32, b as i64, sq as i64, (hi - lo) as i64, h as i64, h as i64, d as i64)
            .build()
            .unwrap();
        let mut o = vec![f32::NAN; q.len()];
        let mut lse = vec![f32::NAN; b * h * sq];
        ctx.forward(&config, &q, &take(&k), &take(&v), &mut o, Some(&mut lse)).unwrap();
        (o, lse)
    };
    let (o_all, lse_all) = run(0, sk);
    let (o_a, lse_a) = run(0, split);
    let (o_b, lse_b) = run(split, sk);
    let merge = MergeConfig::new(DType::F32, b as i64, sq as i64, h as i64, d as i64);
    let mut o = vec![f32::NAN; q.len()];
    let mut lse = vec![f32::NAN; b * h * sq];
    ctx.merge_states(&merge, &o_a, &lse_a, &o_b, &lse_b, &mut o, &mut lse).unwrap();
    let widen = |x: &[f32]| -> Vec<f64> { x.iter().map(|&e| e as f64).collect() };
    assert_close("merged o", &o, &widen(&o_all), 1e-6);
    assert_close("merged lse", &lse, &widen(&lse_all), 1e-6);

    let mut short = vec![0f32; b * h * sq - 1];
    let err = ctx.merge_states(&merge, &o_a, &lse_a, &o_b, &lse_b, &mut o, &mut short).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("lse holds"), "{}", err.detail());
}

#[test]
fn run_arguments_are_checked_against_the_config() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let config = Config::builder(DType::F32, 2, 1, 8, 2, 1, 4).kv_cache().sinks(true).build().unwrap();
    let e = config.extents().unwrap();
    let (q, k, v) = (data(e.q, 1), data(e.k, 2), data(e.v, 3));
    let mut o = vec![f32::NAN; e.o];
    let sinks = [0.0f32, 1.0];
    let cases: [(RunArgs<'_>, &str); 4] = [
        (RunArgs { sinks: Some(&sinks), ..RunArgs::default() }, "needs cache_seqlens"),
        (RunArgs { cache_seqlens: Some(&[3]), sinks: Some(&sinks), ..RunArgs::default() }, "cache_seqlens holds 1"),
        (RunArgs { cache_seqlens: Some(&[3, 4]), ..RunArgs::default() }, "needs sinks"),
        (
            RunArgs { cache_seqlens: Some(&[3, 4]), sinks: Some(&sinks), alibi_slopes: Some(&sinks), ..RunArgs::default() },
            "alibi_slopes given",
        ),
    ];
    for (args, message) in cases {
        let err = ctx.forward_ex(&config, &q, &k, &v, &mut o, None, &args).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
        assert!(err.detail().contains(message), "{} vs {message}", err.detail());
        assert!(o.iter().all(|x| x.is_nan()));
    }
    // A length beyond the cache is a malformed index, reported by the CPU backend.
    let args = RunArgs { cache_seqlens: Some(&[3, 9]), sinks: Some(&sinks), ..RunArgs::default() };
    let err = ctx.forward_ex(&config, &q, &k, &v, &mut o, None, &args).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("cache_seqlens"), "{}", err.detail());
    let args = RunArgs { cache_seqlens: Some(&[3, 8]), sinks: Some(&sinks), ..RunArgs::default() };
    ctx.forward_ex(&config, &q, &k, &v, &mut o, None, &args).unwrap();
    assert!(o.iter().all(|x| x.is_finite()));
}

#[test]
fn e4m3_round_trips_its_values() {
    assert_eq!(E4m3(0x38).to_f32(), 1.0);
    assert_eq!(E4m3(0x7E).to_f32(), 448.0);
    assert_eq!(E4m3(0x01).to_f32(), 2f32.powi(-9));
    assert!(E4m3(0x7F).to_f32().is_nan() && E4m3(0xFF).to_f32().is_nan());
    for b in 0u8..=255 {
        if b & 0x7F != 0x7F {
            assert_eq!(E4m3::from_f32(E4m3(b).to_f32()), E4m3(b), "byte {b:#x}");
        }
    }
    assert_eq!(E4m3::from_f32(1.0625), E4m3(0x38)); // a tie rounds to even
    assert_eq!(E4m3::from_f32(464.0), E4m3(0x7E)); // a tie at the top rounds to 448
    assert_eq!(E4m3::from_f32(1000.0), E4m3(0x7F));
}

#[test]
fn fp8_inputs_and_caches_match_the_reference_with_descales() {
    // bf16 queries against an e4m3 cache, and e4m3 queries with an fp16 o, each with
    // per-(batch, K/V head) descales: the reference runs on the dequantised values.
    let ctx = Context::new(Device::Cpu).unwrap();
    let (b, sq, sk, hq, hkv, d) = (2usize, 17usize, 33usize, 4usize, 2usize, 16usize);
    let e4m3 = |x: &[f32]| x.iter().map(|&v| E4m3::from_f32(v)).collect::<Vec<_>>();
    let kq = e4m3(&data(b * sk * hkv * d, 41));
    let vq = e4m3(&data(b * sk * hkv * d, 42));
    let qd: Vec<f32> = (0..b * hkv).map(|i| 0.5 + 0.25 * i as f32).collect();
    let kd: Vec<f32> = (0..b * hkv).map(|i| 2.0 - 0.375 * i as f32).collect();
    let vd: Vec<f32> = (0..b * hkv).map(|i| 0.75 + 0.5 * i as f32).collect();
    // Dequantised f32 copies of [b, rows, heads, d] tensors, each value times the factor of its
    // (sequence, K/V head).
    let dequant = |x: &[f32], heads: usize, rows: usize, f: &[f32]| -> Vec<f32> {
        (0..x.len())
            .map(|i| {
                let (bi, h) = (i / (rows * heads * d), (i / d) % heads);
                x[i] * f[bi * hkv + h / (heads / hkv)]
            })
            .collect()
    };
    let kf: Vec<f32> = kq.iter().map(|x| x.to_f32()).collect();
    let vf: Vec<f32> = vq.iter().map(|x| x.to_f32()).collect();
    let (k_ref, v_ref) = (dequant(&kf, hkv, sk, &kd), dequant(&vf, hkv, sk, &vd));
    let check = |o: &[f32], q_ref: &[f32], lse: &[f32]| {
        for bi in 0..b {
            let (ro, rl) = reference(
                &q_ref[bi * sq * hq * d..(bi + 1) * sq * hq * d],
                &k_ref[bi * sk * hkv * d..(bi + 1) * sk * hkv * d],
                &v_ref[bi * sk * hkv * d..(bi + 1) * sk * hkv * d],
                (sq, sk, hq, hkv, d),
                Masks { causal: true, ..Masks::default() },
            );
            assert_close("o", &o[bi * sq * hq * d..(bi + 1) * sq * hq * d], &ro, 1e-2);
            assert_close("lse", &lse[bi * hq * sq..(bi + 1) * hq * sq], &rl, 5e-4);
        }
    };
    let builder = |dtype| Config::builder(dtype, b as i64, sq as i64, sk as i64, hq as i64, hkv as i64, d as i64).causal(true);
    let mut lse = vec![f32::NAN; b * hq * sq];

    let q16: Vec<Bf16> = data(b * sq * hq * d, 40).iter().map(|&x| Bf16::from_f32(x)).collect();
    let config = builder(DType::Bf16).kv_dtype(DType::E4m3).descale(Descale::PerHeadKv).build().unwrap();
    let args = RunArgs { k_descale: Some(&kd), v_descale: Some(&vd), ..RunArgs::default() };
    let mut o = vec![Bf16(0x7FFF); b * sq * hq * d];
    ctx.forward_mixed(&config, &q16, &kq, &vq, &mut o, Some(&mut lse), &args).unwrap();
    let q_ref: Vec<f32> = q16.iter().map(|x| x.to_f32()).collect();
    check(&o.iter().map(|x| x.to_f32()).collect::<Vec<_>>(), &q_ref, &lse);
    // A q_descale for bf16 queries is refused.
    let err = ctx
        .forward_mixed(&config, &q16, &kq, &vq, &mut o, None, &RunArgs { q_descale: Some(&qd), ..args })
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("q_descale"), "{}", err.detail());

    let q8 = e4m3(&data(b * sq * hq * d, 43));
    let config = builder(DType::E4m3).out_dtype(DType::F16).descale(Descale::PerHeadKv).build().unwrap();
    assert_eq!((config.kv_dtype(), config.out_dtype()), (DType::E4m3, DType::F16));
    let args = RunArgs { q_descale: Some(&qd), k_descale: Some(&kd), v_descale: Some(&vd), ..RunArgs::default() };
    let mut o = vec![F16(0x7FFF); b * sq * hq * d];
    ctx.forward_mixed(&config, &q8, &kq, &vq, &mut o, Some(&mut lse), &args).unwrap();
    let q_ref = dequant(&q8.iter().map(|x| x.to_f32()).collect::<Vec<_>>(), hq, sq, &qd);
    check(&o.iter().map(|x| x.to_f32()).collect::<Vec<_>>(), &q_ref, &lse);
    // Slices of the wrong type, and a descale of the wrong length, are refused.
    let mut o_bf16 = vec![Bf16(0); b * sq * hq * d];
    let err = ctx.forward_mixed(&config, &q8, &kq, &vq, &mut o_bf16, None, &args).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let err = ctx
        .forward_mixed(&config, &q8, &kq, &vq, &mut o, None, &RunArgs { v_descale: Some(&vd[..1]), ..args })
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("v_descale"), "{}", err.detail());
}

#[test]
fn fp8_type_pairs_outside_the_allowed_ones_are_named() {
    let builder = |dtype| Config::builder(dtype, 1, 1, 1, 1, 1, 8);
    let err = builder(DType::E4m3).kv_dtype(DType::Bf16).build().err().unwrap();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.detail().contains("kv_dtype = 2"), "{}", err.detail());
    let err = builder(DType::F32).kv_dtype(DType::E4m3).build().err().unwrap();
    assert!(err.detail().contains("kv_dtype = 4"), "{}", err.detail());
    let err = builder(DType::Bf16).out_dtype(DType::F16).build().err().unwrap();
    assert!(err.detail().contains("out_dtype = 1"), "{}", err.detail());
    let err = builder(DType::Bf16).descale(Descale::PerHeadKv).build().err().unwrap();
    assert!(err.detail().contains("descale = 1"), "{}", err.detail());
    assert_eq!(builder(DType::E4m3).build().unwrap().out_dtype(), DType::Bf16);
}
