use uraid_core::array::temporary;
use uraid_core::member::{Member, MemberSpec, OpenMode};

#[test]
fn write_then_read_on_mem_members() {
    let ms: Vec<Member> = (0..3)
        .map(|_| Member::open(&"mem:16M".parse::<MemberSpec>().unwrap(), OpenMode { write: true, exclusive: true }).unwrap())
        .collect();
    let (v, _) = temporary(ms, 4096).unwrap();
    let data: Vec<u8> = (0..(1 << 20) + 8192).map(|i| (i * 7 + i / 4096) as u8).collect();
    v.write_at(4096 * 3, &data).unwrap();
    assert_eq!(v.read_at(4096 * 3, data.len()).unwrap(), data);
}
