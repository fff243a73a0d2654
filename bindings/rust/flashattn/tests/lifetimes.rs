//! Handles across threads and drop order (that a plan cannot outlive its context is a
//! compile-fail doctest on `Plan`).
use std::sync::Arc;

use flashattn::{Config, Context, DType, Device};

#[test]
fn a_context_and_a_plan_are_shared_between_threads() {
    let ctx = Arc::new(Context::new(Device::Cpu).unwrap());
    let config = Config::builder(DType::F32, 1, 33, 47, 4, 2, 16).causal(true).build().unwrap();
    let e = config.extents().unwrap();
    let q: Vec<f32> = (0..e.q).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
    let k: Vec<f32> = (0..e.k).map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0).collect();
    let v: Vec<f32> = (0..e.v).map(|i| ((i * 3 % 7) as f32 - 3.0) / 4.0).collect();
    let mut expected = vec![0f32; e.o];
    ctx.forward(&config, &q, &k, &v, &mut expected, None).unwrap();

    let plan = ctx.plan(&config).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (ctx, plan, q, k, v, expected) = (&ctx, &plan, &q, &k, &v, &expected);
            s.spawn(move || {
                for _ in 0..5 {
                    let mut o = vec![0f32; expected.len()];
                    if t % 2 == 0 {
                        ctx.forward(&config, q, k, v, &mut o, None).unwrap();
                    } else {
                        plan.run(q, k, v, &mut o, None).unwrap();
                    }
                    assert_eq!(&o, expected);
                }
            });
        }
    });
    drop(plan);
    // The context moves to another thread and is dropped there.
    let handle = std::thread::spawn(move || Arc::try_unwrap(ctx).ok().unwrap().device());
    assert_eq!(handle.join().unwrap(), Device::Cpu);
}

#[test]
fn many_contexts_and_plans_are_created_and_dropped() {
    for _ in 0..50 {
        let ctx = Context::new(Device::Cpu).unwrap();
        let config = Config::builder(DType::F32, 1, 2, 2, 1, 1, 8).build().unwrap();
        let plans: Vec<_> = (0..3).map(|_| ctx.plan(&config).unwrap()).collect();
        drop(plans);
    }
}
