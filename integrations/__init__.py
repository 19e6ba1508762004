"""What Agentdesk sends out: webhooks (outbox trigger, signing, retries, dead
letters) and notifications to approvers, and their desk pages.

May import: agents, capabilities, approvals, the desk (its page helpers);
never the API.
"""
