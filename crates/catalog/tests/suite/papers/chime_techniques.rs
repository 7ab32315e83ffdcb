use dmindex_catalog::papers::chime::techniques::staircase;

/// The staircase derived from CHIME's factor list is the paper's Fig. 15 order.
#[test]
fn staircase_follows_the_factor_list() {
    let labels: Vec<String> = staircase().into_iter().map(|s| s.0).collect();
    assert_eq!(
        labels,
        ["Sherman", "+hopscotch", "+vacancy", "+replication", "+sibling", "+speculative"]
    );
    let last = staircase().pop().unwrap().1;
    assert_eq!(last.len(), dmindex_chime::FACTORS.len());
}
