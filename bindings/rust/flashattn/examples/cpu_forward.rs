//! Grouped-query causal attention on the CPU backend, checked against a direct computation of one
//! output row.
//!
//!     cargo run --example cpu_forward
use flashattn::{Bf16, Config, Context, DType, Device};

fn main() -> Result<(), flashattn::Error> {
    let (batch, seq, heads_q, heads_kv, d) = (2usize, 128usize, 8usize, 2usize, 64usize);
    let ctx = Context::new(Device::Cpu)?;
    let config = Config::builder(DType::Bf16, batch as i64, seq as i64, seq as i64,
                                 heads_q as i64, heads_kv as i64, d as i64)
        .causal(true)
        .build()?;
    let e = config.extents()?;
    let make = |n: usize, m: usize| -> Vec<Bf16> {
        (0..n).map(|i| Bf16::from_f32(((i * m % 97) as f32 - 48.0) / 64.0)).collect()
    };
    let (q, k, v) = (make(e.q, 31), make(e.k, 17), make(e.v, 13));
    let mut o = vec![Bf16::default(); e.o];
    let mut lse = vec![0f32; e.lse];
    ctx.forward(&config, &q, &k, &v, &mut o, Some(&mut lse))?;

    // Row 100 of batch 1, head 5 (K/V head 1), by hand in f64.
    let (b, h, i, g) = (1usize, 5usize, 100usize, 1usize);
    let at = |x: &[Bf16], s: usize, heads: usize, hh: usize, c: usize| x[((b * seq + s) * heads + hh) * d + c].to_f32() as f64;
    let scores: Vec<f64> = (0..=i)
        .map(|j| (0..d).map(|c| at(&q, i, heads_q, h, c) * at(&k, j, heads_kv, g, c)).sum::<f64>() / (d as f64).sqrt())
        .collect();
    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let l: f64 = scores.iter().map(|s| (s - m).exp()).sum();
    let mut worst = 0f64;
    for c in 0..d {
        let want: f64 = (0..=i).map(|j| (scores[j] - m).exp() / l * at(&v, j, heads_kv, g, c)).sum();
        worst = worst.max((want - at(&o, i, heads_q, h, c)).abs());
    }
    let lse_err = (m + l.ln() - lse[(b * heads_q + h) * seq + i] as f64).abs();
    println!("libflashattn {} on the CPU: bf16 GQA causal attention, batch {batch}, {seq} rows, {heads_q}/{heads_kv} heads, d {d}", flashattn::version());
    println!("row check: max abs error {worst:.2e} (bf16 rounding bound 4e-3), LSE error {lse_err:.2e}");
    assert!(worst < 4e-3 && lse_err < 1e-4);
    Ok(())
}
