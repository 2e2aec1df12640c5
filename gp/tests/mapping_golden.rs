//! Hand-derived genotype-to-phenotype mappings for the three built-in grammars. Each
//! codon list was worked out by following the grammar listing: rules with a single
//! alternative read no codon, every other rule reads one and takes `codon % n`.

use gpfarm_gp::{Genome, InvalidReason, Mapping, MappingLimits, Problem, map};

fn derive(problem: &str, codons: &[u32], max_wraps: u32) -> Mapping {
    let p = Problem::builtin(problem).unwrap();
    let limits = MappingLimits { max_wraps, ..MappingLimits::default() };
    map(p.grammar(), &Genome(codons.to_vec()), &limits)
}

fn phenotype(m: &Mapping) -> &str {
    match m {
        Mapping::Valid(d) => d.phenotype.as_str(),
        Mapping::Invalid(r) => panic!("expected a phenotype, got invalid: {r}"),
    }
}

#[test]
fn search_genome_derives_a_first_index_search() {
    let codons = [
        2, // <statements>: three statements
        2, // <statement>: <loop>
        0, // <statements2>: one
        1, // <statement2>: <if2>
        1, 2, 0, // <expr> -> <expr2> -> <var-indexed>, INPUT[tmp % LENINPUT]
        3, // <comp-op>: !=
        1, 1, 3, // <expr> -> <expr2> -> <var-read> SEARCH
        0, // <statements3>: one
        0, // <var-write>: tmp
        0, 1, 0, 0, 0, 0, // <expr>: tmp + 1
        0, // <statement>: <assignment>
        1, 1, 1, 0, // OUTPUT = tmp
        1, // <statement>: <if>
        1, 1, 0, 2, 1, 1, 1, // tmp == i
        0, 0, 1, 1, 0, 2, // OUTPUT = (-1)
    ];
    let m = derive("search", &codons, 2);
    assert_eq!(
        phenotype(&m),
        "for(i=0;i < LENINPUT;i++){if (INPUT[tmp % LENINPUT] != SEARCH) {tmp = tmp + 1;}}\
         OUTPUT = tmp;if (tmp == i) {OUTPUT = (-1);}"
    );
    let d = m.derivation().unwrap();
    assert_eq!(d.used_codons, codons.len());
    assert_eq!(d.wraps, 0);
}

#[test]
fn search_genome_that_wraps_twice() {
    // Nine reads from three codons: one statement, an assignment to OUTPUT (1), then
    // after the first wrap `<expr2> <bi-op> <expr2>` with int 2, and after the second
    // `+` and int 2 again.
    let m = derive("search", &[0, 0, 1], 2);
    assert_eq!(phenotype(&m), "OUTPUT = 2 + 2;");
    let d = m.derivation().unwrap();
    assert_eq!((d.used_codons, d.wraps), (9, 2));
    assert!(!derive("search", &[0, 0, 1], 1).is_valid());
}

#[test]
fn keijzer6_genomes_derive_expressions_and_constants() {
    assert_eq!(phenotype(&derive("keijzer6", &[9], 2)), "x");
    assert_eq!(phenotype(&derive("keijzer6", &[13, 0, 7, 3, 5], 2)), "07.35");
    assert_eq!(phenotype(&derive("keijzer6", &[0, 9, 5, 9], 2)), "x + sinf(x)");
    // 8 % 17 = 8: logf(fabsf(<e2>)+1); 30 % 21 = 9: x.
    assert_eq!(phenotype(&derive("keijzer6", &[8, 30], 2)), "logf(fabsf(x)+1)");
}

#[test]
fn keijzer6_genome_that_wraps_once() {
    // 51 % 17 = 0 picks `<e2> + <e2>`; 9 gives x; re-reading 51 for the second <e2>
    // gives 51 % 21 = 9, x again.
    let m = derive("keijzer6", &[51, 9], 2);
    assert_eq!(phenotype(&m), "x + x");
    let d = m.derivation().unwrap();
    assert_eq!((d.used_codons, d.wraps), (3, 1));
    assert!(!derive("keijzer6", &[51, 9], 0).is_valid());
}

#[test]
fn keijzer6_genome_that_needs_too_many_wraps_is_invalid() {
    // Codon 0 always picks the first, recursive alternative: every read asks for more.
    assert_eq!(
        derive("keijzer6", &[0], 2),
        Mapping::Invalid(InvalidReason::OutOfCodons { codons: 1, passes: 3 })
    );
}

#[test]
fn multiplier5_genomes_derive_ten_assignments() {
    let all_a0: Vec<u32> = [1, 0].repeat(10);
    let expected: String = (0..10).map(|k| format!("o{k}=a0;")).collect();
    assert_eq!(phenotype(&derive("multiplier5", &all_a0, 2)), expected);

    let and: Vec<u32> = [0, 1, 0, 0, 1, 5].repeat(10);
    let expected: String = (0..10).map(|k| format!("o{k}=(a0 & b0);")).collect();
    assert_eq!(phenotype(&derive("multiplier5", &and, 2)), expected);

    // Output 0 is (~ a3); the rest reuse codons by wrapping.
    let m = derive("multiplier5", &[2, 3], 9);
    let expected: String = (0..10).map(|k| format!("o{k}=(~ a3);")).collect();
    assert_eq!(phenotype(&m), expected);
    assert_eq!(m.derivation().unwrap().wraps, 9);
    assert!(!derive("multiplier5", &[2, 3], 2).is_valid());
}
