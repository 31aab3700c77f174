/* tc egress program: push an 802.1Q tag (VID 100, PCP 0) on every frame. */
typedef unsigned short __u16;
typedef unsigned int __u32;
struct __sk_buff;
static long (*bpf_skb_vlan_push)(struct __sk_buff *skb, __u16 proto, __u16 tci) = (void *)18;
__attribute__((section("tc"), used)) int vlan_push(struct __sk_buff *skb)
{
    bpf_skb_vlan_push(skb, __builtin_bswap16(0x8100), 100);
    return 0; /* TC_ACT_OK */
}
char _license[] __attribute__((section("license"), used)) = "GPL";
