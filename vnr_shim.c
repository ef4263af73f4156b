// SPDX-License-Identifier: GPL-2.0
/* See vnr_shim.h. */
#include <linux/uaccess.h>
#include <linux/skbuff.h>
#include <linux/if_tun.h>
#include <linux/if_vlan.h>
#include <linux/ptr_ring.h>
#include <linux/net.h>
#include <net/sock.h>
#include <net/xdp.h>
#include "vnr_shim.h"

int vnr_get_user_u16(const u16 __user *uaddr, u16 *val)
{
	return get_user(*val, uaddr);
}

int vnr_put_user_u16(u16 __user *uaddr, u16 val)
{
	return put_user(val, uaddr);
}

size_t vnr_xdp_buff_size(void)
{
	return sizeof(struct xdp_buff);
}

unsigned int vnr_xdp_shinfo_size(void)
{
	return SKB_DATA_ALIGN(sizeof(struct skb_shared_info));
}

unsigned int vnr_xdp_rx_pad(void)
{
	return NET_IP_ALIGN + NET_SKB_PAD;
}

void vnr_xdp_prepare(void *xdp, void *buf, unsigned int buflen, unsigned int pad,
		     unsigned int datalen)
{
	xdp_init_buff(xdp, buflen, NULL);
	xdp_prepare_buff(xdp, buf, pad, datalen, true);
}

void *vnr_xdp_data(void *xdp)
{
	return ((struct xdp_buff *)xdp)->data;
}

/* tun takes batches when its socket's send buffer is unlimited (its default). */
bool vnr_sock_can_batch(struct socket *sock)
{
	return READ_ONCE(sock->sk->sk_sndbuf) == INT_MAX;
}

int vnr_tun_send_batch(struct socket *sock, void *xdp, unsigned int n)
{
	struct tun_msg_ctl ctl = { .type = TUN_MSG_PTR, .num = n, .ptr = xdp };
	struct msghdr msg = {
		.msg_control = &ctl,
		.msg_controllen = sizeof(ctl),
		.msg_flags = MSG_DONTWAIT,
	};

	return sock->ops->sendmsg(sock, &msg, 0);
}

struct ptr_ring *vnr_tun_rx_ring(struct file *file)
{
	struct ptr_ring *r = tun_get_tx_ring(file);

	return IS_ERR(r) ? NULL : r;
}

int vnr_rx_ring_consume(struct ptr_ring *ring, void **q, int n)
{
	return ptr_ring_consume_batched(ring, q, n);
}

void vnr_rx_ring_unconsume(struct ptr_ring *ring, void **q, int n)
{
	ptr_ring_unconsume(ring, q, n, tun_ptr_free);
}

/* The length tun will deliver for a queued entry, as tun_ptr_peek_len(). */
int vnr_rx_ptr_len(void *ptr)
{
	struct sk_buff *skb = ptr;

	if (tun_is_xdp_frame(ptr))
		return tun_ptr_to_xdp(ptr)->len;
	return skb->len + (skb_vlan_tag_present(skb) ? VLAN_HLEN : 0);
}
