//! `cargo bench -p gpfarm-bench`: the same code as `gpfarm bench --quick`, writing to
//! target/bench-quick/.

fn main() -> anyhow::Result<()> {
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-quick");
    std::fs::create_dir_all(&out)?;
    let config = gpfarm_bench::BenchConfig::quick(out.clone());
    let rows = gpfarm_bench::run(&config, |line| eprintln!("{line}"))?;
    gpfarm_bench::report::write_csv(&rows, &out.join("bench.csv"))?;
    let md = gpfarm_bench::report::tables(&rows, "# Quick benchmark");
    std::fs::write(out.join("tables.md"), &md)?;
    gpfarm_bench::plot::draw_all(&rows, &out)?;
    println!("{md}");
    Ok(())
}
