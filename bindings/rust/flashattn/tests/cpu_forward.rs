//! The CPU path end to end, against a naive float64 reference.
use flashattn::{Bf16, Config, Context, DType, Device, Element, Layout, RunArgs, F16};

struct Problem {
    batch: usize,
    sq: usize,
    sk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    causal: bool,
}

/// Uniform in +-[1/64, 1] from a fixed LCG (no dependencies).
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let mag = 1.0 / 64.0 + u * (1.0 - 1.0 / 64.0);
            if (s >> 7) & 1 == 1 { mag } else { -mag }
        })
        .collect()
}

/// Packed layouts; returns o [b, sq, hq, d] and lse [b, hq, sq] in f64.
fn reference(p: &Problem, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let scale = 1.0 / (p.d as f64).sqrt();
    let mut o = vec![0.0; p.batch * p.sq * p.hq * p.d];
    let mut lse = vec![f64::NEG_INFINITY; p.batch * p.hq * p.sq];
    for b in 0..p.batch {
        for h in 0..p.hq {
            let g = h / (p.hq / p.hkv);
            for i in 0..p.sq {
                let visible = |j: usize| !p.causal || (j as i64) <= i as i64 + p.sk as i64 - p.sq as i64;
                let s: Vec<f64> = (0..p.sk)
                    .map(|j| {
                        if !visible(j) {
                            return f64::NEG_INFINITY;
                        }
                        (0..p.d)
                            .map(|c| q[((b * p.sq + i) * p.hq + h) * p.d + c] * k[((b * p.sk + j) * p.hkv + g) * p.d + c])
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
                lse[(b * p.hq + h) * p.sq + i] = m + l.ln();
                for c in 0..p.d {
                    o[((b * p.sq + i) * p.hq + h) * p.d + c] = (0..p.sk)
                        .map(|j| (s[j] - m).exp() / l * v[((b * p.sk + j) * p.hkv + g) * p.d + c])
                        .sum();
                }
            }
        }
    }
    (o, lse)
}

fn run<T: Element>(p: &Problem, to: fn(f64) -> T, from: fn(T) -> f64, tol: f64) {
    let ctx = Context::new(Device::Cpu).unwrap();
    let config = Config::builder(T::DTYPE, p.batch as i64, p.sq as i64, p.sk as i64, p.hq as i64,
                                 p.hkv as i64, p.d as i64)
        .causal(p.causal)
        .build()
        .unwrap();
    // Inputs rounded to T first, so the reference sees exactly what the library sees.
    let round = |x: Vec<f64>| -> Vec<T> { x.into_iter().map(to).collect() };
    let q = round(data(p.batch * p.sq * p.hq * p.d, 1));
    let k = round(data(p.batch * p.sk * p.hkv * p.d, 2));
    let v = round(data(p.batch * p.sk * p.hkv * p.d, 3));
    let back = |x: &[T]| -> Vec<f64> { x.iter().map(|&e| from(e)).collect() };
    let (ref_o, ref_lse) = reference(p, &back(&q), &back(&k), &back(&v));
    let mut o = vec![to(f64::NAN); q.len()];
    let mut lse = vec![f32::NAN; p.batch * p.hq * p.sq];
    ctx.forward(&config, &q, &k, &v, &mut o, Some(&mut lse)).unwrap();
    for (got, want) in back(&o).iter().zip(&ref_o) {
        assert!((got - want).abs() <= tol, "o {got} vs {want}");
    }
    for (got, want) in lse.iter().zip(&ref_lse) {
        if want.is_infinite() {
            assert_eq!(*got as f64, *want);
        } else {
            assert!((*got as f64 - want).abs() <= 1e-4, "lse {got} vs {want}");
        }
    }
    // A plan gives the same result.
    let plan = ctx.plan(&config).unwrap();
    assert!(plan.kernel().unwrap().is_none());
    assert_eq!(plan.workspace_size().unwrap(), 0);
    let mut o2 = vec![to(f64::NAN); q.len()];
    plan.run(&q, &k, &v, &mut o2, None).unwrap();
    assert_eq!(back(&o2), back(&o));
}

const SHAPES: [Problem; 4] = [
    Problem { batch: 2, sq: 17, sk: 33, hq: 4, hkv: 2, d: 16, causal: false },
    Problem { batch: 1, sq: 40, sk: 16, hq: 8, hkv: 1, d: 32, causal: true },
    Problem { batch: 1, sq: 1, sk: 77, hq: 2, hkv: 2, d: 64, causal: true },
    Problem { batch: 3, sq: 64, sk: 64, hq: 2, hkv: 1, d: 8, causal: true },
];

#[test]
fn f32_matches_reference() {
    for p in &SHAPES {
        run::<f32>(p, |x| x as f32, |x| x as f64, 1e-5);
    }
}

#[test]
fn f16_matches_reference() {
    // fp32 accumulation, one rounding to fp16: within an ulp (2^-11 relative, |o| < 1).
    for p in &SHAPES {
        run::<F16>(p, |x| F16::from_f32(x as f32), |x| x.to_f32() as f64, 1e-3);
    }
}

#[test]
fn bf16_matches_reference() {
    // One rounding to bf16: within an ulp (2^-8 relative, |o| < 1).
    for p in &SHAPES {
        run::<Bf16>(p, |x| Bf16::from_f32(x as f32), |x| x.to_f32() as f64, 8e-3);
    }
}

#[test]
fn strided_views_of_a_packed_qkv_buffer() {
    let (b, s, hq, hkv, d) = (2usize, 19usize, 4usize, 2usize, 8usize);
    let row = (hq + 2 * hkv) * d;
    let qkv: Vec<f32> = data(b * s * row, 9).into_iter().map(|x| x as f32).collect();
    let ctx = Context::new(Device::Cpu).unwrap();
    let strides = ((s * row) as i64, row as i64, d as i64);
    let config = Config::builder(DType::F32, b as i64, s as i64, s as i64, hq as i64, hkv as i64, d as i64)
        .q_strides(strides.0, strides.1, strides.2)
        .k_strides(strides.0, strides.1, strides.2)
        .v_strides(strides.0, strides.1, strides.2)
        .build()
        .unwrap();
    let mut o = vec![0f32; b * s * hq * d];
    ctx.forward(&config, &qkv, &qkv[hq * d..], &qkv[(hq + hkv) * d..], &mut o, None).unwrap();
    // The same problem from packed copies.
    let pick = |start: usize, heads: usize| -> Vec<f32> {
        (0..b * s).flat_map(|r| qkv[r * row + start..r * row + start + heads * d].to_vec()).collect()
    };
    let (q, k, v) = (pick(0, hq), pick(hq * d, hkv), pick((hq + hkv) * d, hkv));
    let packed = Config::builder(DType::F32, b as i64, s as i64, s as i64, hq as i64, hkv as i64, d as i64)
        .build()
        .unwrap();
    let mut o2 = vec![0f32; o.len()];
    ctx.forward(&packed, &q, &k, &v, &mut o2, None).unwrap();
    assert_eq!(o, o2);
}

/// [b, s, h, d] <-> [b, h, s, d]: the same transposition both ways.
fn swap_seq_heads(x: &[f32], b: usize, outer: usize, inner: usize, d: usize) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    for bi in 0..b {
        for i in 0..outer {
            for j in 0..inner {
                let from = ((bi * outer + i) * inner + j) * d;
                let to = ((bi * inner + j) * outer + i) * d;
                y[to..to + d].copy_from_slice(&x[from..from + d]);
            }
        }
    }
    y
}

#[test]
fn bhsd_layout_reads_pytorch_order() {
    // seqlen_q != seqlen_k and heads_q != heads_kv, so a stride built from the wrong size differs.
    let (b, sq, sk, hq, hkv, d) = (2usize, 5usize, 7usize, 4usize, 2usize, 8usize);
    let f32s = |n: usize, seed: u64| -> Vec<f32> { data(n, seed).into_iter().map(|x| x as f32).collect() };
    let (q, k, v) = (f32s(b * sq * hq * d, 11), f32s(b * sk * hkv * d, 12), f32s(b * sk * hkv * d, 13));
    let ctx = Context::new(Device::Cpu).unwrap();
    let builder = Config::builder(DType::F32, b as i64, sq as i64, sk as i64, hq as i64, hkv as i64, d as i64)
        .causal(true);
    let bshd = builder.build().unwrap();
    let bhsd = builder.layout(Layout::Bhsd).build().unwrap();
    // Packed either way: same extents.
    assert_eq!(bhsd.extents().unwrap(), bshd.extents().unwrap());

    let mut o = vec![f32::NAN; q.len()];
    ctx.forward(&bshd, &q, &k, &v, &mut o, None).unwrap();
    let (qt, kt, vt) = (swap_seq_heads(&q, b, sq, hq, d), swap_seq_heads(&k, b, sk, hkv, d),
                        swap_seq_heads(&v, b, sk, hkv, d));
    let mut ot = vec![f32::NAN; q.len()];
    ctx.forward(&bhsd, &qt, &kt, &vt, &mut ot, None).unwrap();
    // Same rows, same arithmetic: equal to the bit once o is transposed back.
    assert_eq!(swap_seq_heads(&ot, b, hq, sq, d), o);

    // The transposed buffers read as [b, s, h, d] are another problem: the layout is what counts.
    let mut wrong = vec![f32::NAN; q.len()];
    ctx.forward(&bshd, &qt, &kt, &vt, &mut wrong, None).unwrap();
    assert_ne!(swap_seq_heads(&wrong, b, hq, sq, d), o);

    // A plan takes the layout too.
    let mut op = vec![f32::NAN; q.len()];
    ctx.plan(&bhsd).unwrap().run(&qt, &kt, &vt, &mut op, None).unwrap();
    assert_eq!(op, ot);
}

#[test]
fn layout_sets_every_stride_and_bshd_restores_packed() {
    let builder = Config::builder(DType::F32, 3, 5, 7, 4, 2, 8);
    let bhsd = builder.layout(Layout::Bhsd).build().unwrap();
    let r = bhsd.as_raw();
    assert_eq!((r.q_batch_stride, r.q_seq_stride, r.q_head_stride), (4 * 5 * 8, 8, 5 * 8));
    assert_eq!((r.k_batch_stride, r.k_seq_stride, r.k_head_stride), (2 * 7 * 8, 8, 7 * 8));
    assert_eq!((r.v_batch_stride, r.v_seq_stride, r.v_head_stride), (2 * 7 * 8, 8, 7 * 8));
    assert_eq!((r.o_batch_stride, r.o_seq_stride, r.o_head_stride), (4 * 5 * 8, 8, 5 * 8));
    let back = builder.layout(Layout::Bhsd).layout(Layout::Bshd).build().unwrap();
    let (a, z) = (back.as_raw(), builder.build().unwrap());
    let z = z.as_raw();
    assert_eq!(
        [a.q_batch_stride, a.q_seq_stride, a.q_head_stride, a.k_batch_stride, a.k_seq_stride,
         a.k_head_stride, a.v_batch_stride, a.v_seq_stride, a.v_head_stride, a.o_batch_stride,
         a.o_seq_stride, a.o_head_stride],
        [z.q_batch_stride, z.q_seq_stride, z.q_head_stride, z.k_batch_stride, z.k_seq_stride,
         z.k_head_stride, z.v_batch_stride, z.v_seq_stride, z.v_head_stride, z.o_batch_stride,
         z.o_seq_stride, z.o_head_stride]
    );
    assert_eq!(Layout::default(), Layout::Bshd);
}

// Layout::Bhsd's strides were computed when layout() was called, from seqlen and head_dim: a
// paged cache's pages (page_size rows) and a varlen batch's rows (total_q / total_k, batch
// stride 0) got a dense problem's strides (head 1 read head 0's page; varlen failed to build),
// and a head_dim_v() after layout() left v and o strided by head_dim.
#[test]
fn bhsd_layout_follows_pages_varlen_and_head_dim_v_in_any_order() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let f32s = |n: usize, seed: u64| -> Vec<f32> { data(n, seed).into_iter().map(|x| x as f32).collect() };
    let (hq, hkv, d) = (4usize, 2usize, 8usize);

    // Paged: pages [num_pages, page_size, heads_kv, d] against HND [num_pages, heads_kv, page_size, d].
    let (b, sq, pages, page, per_seq) = (2usize, 3usize, 6usize, 4usize, 3usize);
    let (q, k, v) = (f32s(b * sq * hq * d, 21), f32s(pages * page * hkv * d, 22), f32s(pages * page * hkv * d, 23));
    let (table, lens) = ([5i32, 0, 3, 1, 4, 2], [9i32, 11]);
    let args = RunArgs { cache_seqlens: Some(&lens), block_table: Some(&table), ..Default::default() };
    let paged = |layout| {
        Config::builder(DType::F32, b as i64, sq as i64, (per_seq * page) as i64, hq as i64, hkv as i64, d as i64)
            .causal(true)
            .layout(layout)
            .paged_kv(pages as i64, page as i64, per_seq as i64)
            .build()
            .unwrap()
    };
    let mut o = vec![f32::NAN; q.len()];
    ctx.forward_ex(&paged(Layout::Bshd), &q, &k, &v, &mut o, None, &args).unwrap();
    let mut ot = vec![f32::NAN; q.len()];
    ctx.forward_ex(&paged(Layout::Bhsd), &swap_seq_heads(&q, b, sq, hq, d), &swap_seq_heads(&k, pages, page, hkv, d),
                   &swap_seq_heads(&v, pages, page, hkv, d), &mut ot, None, &args).unwrap();
    assert_eq!(swap_seq_heads(&ot, b, hq, sq, d), o);

    // Varlen: [total, heads, d] against [heads, total, d].
    let (total_q, total_k) = (7usize, 12usize);
    let (q, k, v) = (f32s(total_q * hq * d, 31), f32s(total_k * hkv * d, 32), f32s(total_k * hkv * d, 33));
    let (cu_q, cu_k) = ([0i32, 4, 7], [0i32, 5, 12]);
    let args = RunArgs { cu_seqlens_q: Some(&cu_q), cu_seqlens_k: Some(&cu_k), ..Default::default() };
    let varlen = |layout| {
        Config::builder(DType::F32, 2, 4, 7, hq as i64, hkv as i64, d as i64)
            .layout(layout)
            .varlen(total_q as i64, total_k as i64)
            .build()
            .unwrap()
    };
    let mut o = vec![f32::NAN; q.len()];
    ctx.forward_ex(&varlen(Layout::Bshd), &q, &k, &v, &mut o, None, &args).unwrap();
    let mut ot = vec![f32::NAN; q.len()];
    ctx.forward_ex(&varlen(Layout::Bhsd), &swap_seq_heads(&q, 1, total_q, hq, d), &swap_seq_heads(&k, 1, total_k, hkv, d),
                   &swap_seq_heads(&v, 1, total_k, hkv, d), &mut ot, None, &args).unwrap();
    assert_eq!(swap_seq_heads(&ot, 1, hq, total_q, d), o);

    // head_dim_v before or after layout(): the same strides, v's and o's by head_dim_v.
    let builder = Config::builder(DType::F32, 2, 5, 7, 4, 2, 16);
    let (a, z) = (builder.layout(Layout::Bhsd).head_dim_v(8).build().unwrap(),
                  builder.head_dim_v(8).layout(Layout::Bhsd).build().unwrap());
    let (a, z) = (a.as_raw(), z.as_raw());
    assert_eq!((a.v_batch_stride, a.v_seq_stride, a.v_head_stride), (2 * 7 * 8, 8, 7 * 8));
    assert_eq!((a.o_batch_stride, a.o_seq_stride, a.o_head_stride), (4 * 5 * 8, 8, 5 * 8));
    assert_eq!((z.v_batch_stride, z.o_head_stride), (a.v_batch_stride, a.o_head_stride));
    // An explicit stride after layout() stays the caller's.
    let own = builder.layout(Layout::Bhsd).k_strides(0, 16, 0).build().unwrap();
    assert_eq!((own.as_raw().k_batch_stride, own.as_raw().k_seq_stride, own.as_raw().k_head_stride), (0, 16, 0));
    assert_eq!(own.as_raw().q_head_stride, 5 * 16);
}
